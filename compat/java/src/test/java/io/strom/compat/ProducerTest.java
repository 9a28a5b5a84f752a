package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The Java producer's settings that change what goes over the wire, checked by reading back. */
@Tag("fast")
class ProducerTest extends CompatTest {

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static List<RecordMetadata> sendAll(Properties props, List<ProducerRecord<byte[], byte[]>> records)
      throws Exception {
    List<RecordMetadata> out = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      List<Future<RecordMetadata>> futures = new ArrayList<>();
      for (ProducerRecord<byte[], byte[]> r : records) {
        futures.add(producer.send(r));
      }
      producer.flush();
      for (Future<RecordMetadata> f : futures) {
        out.add(f.get(30, TimeUnit.SECONDS));
      }
    }
    return out;
  }

  private static List<ProducerRecord<byte[], byte[]>> numbered(String topic, int n) {
    List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      records.add(new ProducerRecord<>(topic, 0, bytes("k" + i), bytes("value-" + i)));
    }
    return records;
  }

  private static void assertValuesInOrder(List<ConsumerRecord<byte[], byte[]>> got, int n) {
    assertEquals(n, got.size(), "records read back");
    for (int i = 0; i < n; i++) {
      assertEquals("value-" + i, new String(got.get(i).value(), StandardCharsets.UTF_8));
      assertEquals(i, got.get(i).offset());
    }
  }

  @ParameterizedTest(name = "acks={0}")
  @ValueSource(strings = {"0", "1", "all"})
  void acksLevelsDeliverEveryRecord(String acks) throws Exception {
    String topic = createTopic("acks" + acks, 1);
    Properties p = producerProps();
    p.put(ProducerConfig.ACKS_CONFIG, acks); // acks=all keeps the default idempotence on
    List<RecordMetadata> sent = sendAll(p, numbered(topic, 50));
    if (!acks.equals("0")) { // acks=0 gets no offsets back
      for (int i = 0; i < sent.size(); i++) {
        assertEquals(i, sent.get(i).offset());
      }
    }
    assertValuesInOrder(readAll(topic, 1, 50), 50);
  }

  @Test
  void idempotentProducerIsTheDefault() throws Exception {
    String topic = createTopic("idem", 1);
    Properties p = producerProps();
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
      // With idempotence the producer asks InitProducerId first; a broker without it fails the send.
      producer.send(new ProducerRecord<>(topic, bytes("k"), bytes("value-0"))).get(30, TimeUnit.SECONDS);
    }
    assertValuesInOrder(readAll(topic, 1, 1), 1);
  }

  @ParameterizedTest(name = "compression={0}")
  @ValueSource(strings = {"gzip", "snappy", "lz4", "zstd"})
  void compressedBatchesReadBack(String codec) throws Exception {
    String topic = createTopic("comp-" + codec, 1);
    Properties p = producerProps();
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
    p.put(ProducerConfig.LINGER_MS_CONFIG, "20"); // several records per compressed batch
    sendAll(p, numbered(topic, 200));
    assertValuesInOrder(readAll(topic, 1, 200), 200);
  }

  @Test
  void headersSurviveTheRoundTrip() throws Exception {
    String topic = createTopic("headers", 1);
    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, 0, bytes("k"), bytes("v"));
    r.headers().add(new RecordHeader("trace", bytes("abc")));
    r.headers().add(new RecordHeader("trace", bytes("second")));
    r.headers().add(new RecordHeader("empty", new byte[0]));
    r.headers().add(new RecordHeader("null", (byte[]) null));
    sendAll(producerProps(), List.of(r));
    List<ConsumerRecord<byte[], byte[]>> got = readAll(topic, 1, 1);
    assertEquals(1, got.size());
    Header[] headers = got.get(0).headers().toArray();
    assertEquals(4, headers.length);
    assertEquals("trace", headers[0].key());
    assertArrayEquals(bytes("abc"), headers[0].value());
    assertArrayEquals(bytes("second"), headers[1].value());
    assertArrayEquals(new byte[0], headers[2].value());
    assertEquals("null", headers[3].key());
    assertEquals(null, headers[3].value());
  }

  @Test
  void keyedRecordsLandOnTheMurmur2Partition() throws Exception {
    int partitions = 6;
    String topic = createTopic("keyed", partitions);
    List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
    for (int i = 0; i < 60; i++) {
      records.add(new ProducerRecord<>(topic, bytes("key-" + i), bytes("value-" + i)));
    }
    List<RecordMetadata> sent = sendAll(producerProps(), records);
    for (int i = 0; i < records.size(); i++) {
      int expected = Utils.toPositive(Utils.murmur2(records.get(i).key())) % partitions;
      assertEquals(expected, sent.get(i).partition(), "partition of key-" + i);
    }
    for (ConsumerRecord<byte[], byte[]> c : readAll(topic, partitions, records.size())) {
      int expected = Utils.toPositive(Utils.murmur2(c.key())) % partitions;
      assertEquals(expected, c.partition(), "stored partition of " + new String(c.key(), StandardCharsets.UTF_8));
    }
  }

  @Test
  void recordOverMessageMaxBytesFailsWithRecordTooLarge() throws Exception {
    // The broker default message.max.bytes is 1048588 (a batch, uncompressed here); the producer's own
    // limit is raised so the broker, not the client, has to refuse the larger record.
    String topic = createTopic("toolarge", 1);
    Properties p = producerProps();
    p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, "4194304");
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
      RecordMetadata ok = producer.send(new ProducerRecord<>(topic, 0, null, new byte[1_048_000]))
          .get(30, TimeUnit.SECONDS);
      assertEquals(0, ok.offset());
      Future<RecordMetadata> big = producer.send(new ProducerRecord<>(topic, 0, null, new byte[1_100_000]));
      ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(
          ExecutionException.class, () -> big.get(30, TimeUnit.SECONDS));
      assertInstanceOf(RecordTooLargeException.class, e.getCause());
    }
    assertTrue(readAll(topic, 1, 1).size() == 1);
  }

}
