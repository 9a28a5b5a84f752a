package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Transactions of the Java producer as a consume-transform-produce application uses them. */
@Tag("fast")
class TransactionTest extends CompatTest {

  static Properties txProps(String txId) {
    Properties p = producerProps();
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId);
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
    return p;
  }

  private static ProducerRecord<byte[], byte[]> rec(String topic, String value) {
    return new ProducerRecord<>(topic, 0, null, value.getBytes(StandardCharsets.UTF_8));
  }

  private static List<String> values(String topic, String isolation, int atLeast) {
    Properties p = consumerProps(null);
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    List<String> out = new ArrayList<>();
    TopicPartition tp = new TopicPartition(topic, 0);
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.assign(List.of(tp));
      c.seekToBeginning(List.of(tp));
      long end = System.nanoTime() + DEADLINE.toNanos();
      // Read to the end offset (the LSO for read_committed), then stop.
      while (System.nanoTime() < end && (out.size() < atLeast || c.position(tp) < c.endOffsets(List.of(tp)).get(tp))) {
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
          out.add(new String(r.value(), StandardCharsets.UTF_8));
        }
      }
    }
    return out;
  }

  @Test
  void readCommittedSeesOnlyCommittedRecords() throws Exception {
    String topic = createTopic("tx-rc", 1);
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(txProps(uniqueTopic("tx")))) {
      p.initTransactions();
      p.beginTransaction();
      p.send(rec(topic, "c1"));
      p.send(rec(topic, "c2"));
      p.commitTransaction();
      p.beginTransaction();
      p.send(rec(topic, "a1"));
      p.flush();
      p.abortTransaction();
      p.beginTransaction();
      p.send(rec(topic, "c3"));
      p.commitTransaction();
    }
    assertEquals(List.of("c1", "c2", "c3"), values(topic, "read_committed", 3));
    assertEquals(List.of("c1", "c2", "a1", "c3"), values(topic, "read_uncommitted", 4));
  }

  @Test
  void secondProducerWithTheSameTransactionalIdFencesTheFirst() throws Exception {
    String topic = createTopic("tx-fence", 1);
    String txId = uniqueTopic("tx-fence");
    try (KafkaProducer<byte[], byte[]> older = new KafkaProducer<>(txProps(txId))) {
      older.initTransactions();
      older.beginTransaction();
      older.send(rec(topic, "old")).get(30, TimeUnit.SECONDS);
      try (KafkaProducer<byte[], byte[]> newer = new KafkaProducer<>(txProps(txId))) {
        newer.initTransactions(); // aborts the older one's open transaction and bumps the epoch
        // The older producer's EndTxn carries the old epoch: PRODUCER_FENCED.
        Throwable e = causeOf(older::commitTransaction);
        assertInstanceOf(ProducerFencedException.class, e);
        newer.beginTransaction();
        newer.send(rec(topic, "new"));
        newer.commitTransaction();
      }
    }
    assertEquals(List.of("new"), values(topic, "read_committed", 1));
  }

  @Test
  void consumeTransformProduceCommitsOffsetsInTheTransaction() throws Exception {
    String in = createTopic("tx-in", 1);
    String out = createTopic("tx-out", 1);
    String group = uniqueTopic("g-ctp");
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(producerProps())) {
      for (int i = 0; i < 5; i++) {
        p.send(rec(in, "v" + i));
      }
      p.flush();
    }
    Properties cp = consumerProps(group);
    cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp);
        KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(txProps(uniqueTopic("tx-ctp")))) {
      p.initTransactions();
      c.subscribe(List.of(in));
      List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
      long end = System.nanoTime() + DEADLINE.toNanos();
      while (got.size() < 5 && System.nanoTime() < end) {
        c.poll(Duration.ofMillis(100)).forEach(got::add);
      }
      assertEquals(5, got.size());
      p.beginTransaction();
      for (ConsumerRecord<byte[], byte[]> r : got) {
        p.send(rec(out, new String(r.value(), StandardCharsets.UTF_8).toUpperCase()));
      }
      Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
      offsets.put(new TopicPartition(in, 0), new OffsetAndMetadata(5));
      p.sendOffsetsToTransaction(offsets, c.groupMetadata());
      p.commitTransaction();
    }
    assertEquals(List.of("V0", "V1", "V2", "V3", "V4"), values(out, "read_committed", 5));
    OffsetAndMetadata committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
        .get(30, TimeUnit.SECONDS).get(new TopicPartition(in, 0));
    assertNotNull(committed, "offset committed by the transaction");
    assertEquals(5, committed.offset());
  }
}
