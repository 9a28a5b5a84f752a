package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** One Java consumer's offset APIs: commits, seeks, offset lookups, pause/resume. */
@Tag("fast")
class ConsumerTest extends CompatTest {

  /** Ten records on partition 0 with timestamps 1000, 2000, ..., 10000. */
  private String topicWithTenRecords(String prefix) throws Exception {
    String topic = createTopic(prefix, 1);
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
      for (int i = 0; i < 10; i++) {
        producer.send(new ProducerRecord<>(topic, 0, 1_000L * (i + 1), null,
            ("value-" + i).getBytes(StandardCharsets.UTF_8)));
      }
      producer.flush();
    }
    return topic;
  }

  private static List<ConsumerRecord<byte[], byte[]>> pollFor(KafkaConsumer<byte[], byte[]> c, int n) {
    List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (out.size() < n && System.nanoTime() < end) {
      c.poll(Duration.ofMillis(100)).forEach(out::add);
    }
    return out;
  }

  @Test
  void commitSyncAndCommitAsyncAreResumedFrom() throws Exception {
    String topic = topicWithTenRecords("commit");
    String group = uniqueTopic("g-commit");
    TopicPartition tp = new TopicPartition(topic, 0);
    Properties p = consumerProps(group);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.assign(List.of(tp));
      assertEquals(10, pollFor(c, 10).size());
      c.commitSync(Map.of(tp, new OffsetAndMetadata(4, "sync")));
      assertEquals(4, c.committed(java.util.Set.of(tp)).get(tp).offset());
      assertEquals("sync", c.committed(java.util.Set.of(tp)).get(tp).metadata());
      CompletableFuture<Exception> done = new CompletableFuture<>();
      c.commitAsync(Map.of(tp, new OffsetAndMetadata(7)), (offsets, e) -> done.complete(e));
      long end = System.nanoTime() + DEADLINE.toNanos();
      while (!done.isDone() && System.nanoTime() < end) {
        c.poll(Duration.ofMillis(50)); // commitAsync callbacks run inside poll
      }
      assertTrue(done.isDone(), "commitAsync callback");
      assertEquals(null, done.get());
    }
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.assign(List.of(tp));
      List<ConsumerRecord<byte[], byte[]>> rest = pollFor(c, 3);
      assertEquals(3, rest.size());
      assertEquals(7, rest.get(0).offset(), "resumes at the async-committed offset");
    }
  }

  @Test
  void seekBeginningEndAndOffsetsForTimes() throws Exception {
    String topic = topicWithTenRecords("seek");
    TopicPartition tp = new TopicPartition(topic, 0);
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(null))) {
      assertEquals(0L, c.beginningOffsets(List.of(tp)).get(tp));
      assertEquals(10L, c.endOffsets(List.of(tp)).get(tp));
      OffsetAndTimestamp at = c.offsetsForTimes(Map.of(tp, 4_500L)).get(tp);
      assertNotNull(at);
      assertEquals(4, at.offset());
      assertEquals(5_000L, at.timestamp());
      assertEquals(null, c.offsetsForTimes(Map.of(tp, 99_000L)).get(tp), "after the last timestamp");
      c.assign(List.of(tp));
      c.seek(tp, 6);
      List<ConsumerRecord<byte[], byte[]>> got = pollFor(c, 4);
      assertEquals(6, got.get(0).offset());
      assertEquals(4, got.size());
    }
  }

  @Test
  void pauseStopsFetchingAndResumeContinues() throws Exception {
    String topic = topicWithTenRecords("pause");
    TopicPartition tp = new TopicPartition(topic, 0);
    Properties p = consumerProps(null);
    p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2");
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.assign(List.of(tp));
      c.seekToBeginning(List.of(tp));
      assertEquals(2, pollFor(c, 2).size());
      c.pause(List.of(tp));
      assertEquals(java.util.Set.of(tp), c.paused());
      for (int i = 0; i < 5; i++) {
        assertTrue(c.poll(Duration.ofMillis(100)).isEmpty(), "records while paused");
      }
      c.resume(List.of(tp));
      List<ConsumerRecord<byte[], byte[]>> rest = pollFor(c, 8);
      assertEquals(8, rest.size());
      assertEquals(2, rest.get(0).offset());
    }
  }

  @Test
  void fetchPastTheEndWithoutResetRaisesOffsetOutOfRange() throws Exception {
    String topic = topicWithTenRecords("oor");
    TopicPartition tp = new TopicPartition(topic, 0);
    Properties p = consumerProps(null);
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.assign(List.of(tp));
      c.seek(tp, 50);
      Throwable e = causeOf(() -> {
        long end = System.nanoTime() + DEADLINE.toNanos();
        while (System.nanoTime() < end) {
          c.poll(Duration.ofMillis(100));
        }
      });
      assertInstanceOf(OffsetOutOfRangeException.class, e);
    }
  }

}
