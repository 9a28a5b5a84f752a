package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Transaction version 2 (KIP-890 part 2), which Kafka 4.4 finalizes by default: the producer sends
 * no AddPartitionsToTxn or AddOffsetsToTxn (the partition leader and the group coordinator add the
 * partitions), and every EndTxn bumps the producer epoch, so after n transactions the epoch is n.
 */
@Tag("fast")
class TransactionVersionTest extends CompatTest {

  @Test
  void theBrokerFinalizesTransactionVersion2() throws Exception {
    FeatureMetadata features = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS);
    Map<String, FinalizedVersionRange> finalized = features.finalizedFeatures();
    assertTrue(finalized.containsKey("transaction.version"), finalized.toString());
    assertEquals(2, finalized.get("transaction.version").maxVersionLevel());
    assertEquals(1, finalized.get("group.version").maxVersionLevel());
    assertTrue(finalized.get("metadata.version").maxVersionLevel() > 0);
  }

  @Test
  void everyTransactionBumpsTheProducerEpoch() throws Exception {
    String topic = createTopic("tv2", 2);
    String txId = uniqueTopic("tv2-tx");
    String group = uniqueTopic("tv2-g");
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(TransactionTest.txProps(txId))) {
      p.initTransactions();
      int first = describe(txId).producerEpoch();
      for (int i = 0; i < 3; i++) {
        p.beginTransaction();
        p.send(new ProducerRecord<>(topic, i % 2, null, ("v" + i).getBytes(StandardCharsets.UTF_8)));
        if (i == 1) {
          p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(7)),
              new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
        }
        if (i == 2) {
          p.abortTransaction();
        } else {
          p.commitTransaction();
        }
      }
      // three EndTxn requests, three bumps
      assertTrue(eventually(() -> epochOf(txId) == first + 3), "epoch " + epochOf(txId));
    }
    // the offsets committed inside the transaction arrived (the group coordinator added them)
    Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
        .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
    assertEquals(7, offsets.get(new TopicPartition(topic, 0)).offset());
    List<?> committed = readAll(topic, 2, 2);
    assertTrue(committed.size() >= 2);
  }

  private TransactionDescription describe(String txId) throws Exception {
    return admin.describeTransactions(List.of(txId)).description(txId).get(30, TimeUnit.SECONDS);
  }

  private int epochOf(String txId) {
    try {
      return describe(txId).producerEpoch();
    } catch (Exception e) {
      return -1;
    }
  }
}
