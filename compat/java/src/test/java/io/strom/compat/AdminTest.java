package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Admin client calls a Kafka user runs against a single broker, and the errors they raise. */
@Tag("fast")
class AdminTest extends CompatTest {
  private static final long T = 30;

  private TopicDescription describe(String topic) throws Exception {
    // Kafka 4's Admin uses DescribeTopicPartitions (API 75) when the broker advertises it.
    return admin.describeTopics(List.of(topic)).allTopicNames().get(T, TimeUnit.SECONDS).get(topic);
  }

  private List<RecordMetadata> produce(String topic, long... timestamps) throws Exception {
    List<Future<RecordMetadata>> futures = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
      for (long ts : timestamps) {
        futures.add(producer.send(new ProducerRecord<>(topic, 0, ts, null, new byte[] {1})));
      }
      producer.flush();
      List<RecordMetadata> out = new ArrayList<>();
      for (Future<RecordMetadata> f : futures) {
        out.add(f.get(T, TimeUnit.SECONDS));
      }
      return out;
    }
  }

  private ListOffsetsResultInfo offset(String topic, OffsetSpec spec) throws Exception {
    TopicPartition tp = new TopicPartition(topic, 0);
    return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get(T, TimeUnit.SECONDS);
  }

  @Test
  void createDescribeDeleteTopic() throws Exception {
    String topic = uniqueTopic("admin-cdd");
    admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(T, TimeUnit.SECONDS);
    // Kafka's broker applies the controller's commit a moment after createTopics returns (seen
    // once on a loaded machine: listTopics without the new topic), as createTopic's callers wait
    awaitLeaders(topic, 3);
    assertTrue(admin.listTopics().names().get(T, TimeUnit.SECONDS).contains(topic));
    TopicDescription d = describe(topic);
    assertEquals(topic, d.name());
    assertNotNull(d.topicId());
    assertFalse(d.isInternal());
    assertEquals(3, d.partitions().size());
    for (TopicPartitionInfo p : d.partitions()) {
      assertNotNull(p.leader(), "leader of partition " + p.partition());
      assertEquals(1, p.replicas().size());
      assertEquals(1, p.isr().size());
    }
    admin.deleteTopics(List.of(topic)).all().get(T, TimeUnit.SECONDS);
    assertTrue(eventually(() -> {
      try {
        return !admin.listTopics().names().get(T, TimeUnit.SECONDS).contains(topic);
      } catch (Exception e) {
        return false;
      }
    }), "deleted topic still listed");
    assertInstanceOf(UnknownTopicOrPartitionException.class, causeOf(() -> describe(topic)));
  }

  @Test
  void createPartitionsGrowsTheTopic() throws Exception {
    String topic = createTopic("admin-grow", 1);
    admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get(T, TimeUnit.SECONDS);
    assertTrue(eventually(() -> {
      try {
        return describe(topic).partitions().size() == 4;
      } catch (Exception e) {
        return false;
      }
    }), "partitions after createPartitions(4)");
  }

  @Test
  void describeConfigsOfTopicAndBroker() throws Exception {
    String topic = createTopic("admin-cfg", 1, Map.of("retention.ms", "12345"));
    ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
    Config cfg = admin.describeConfigs(List.of(res)).all().get(T, TimeUnit.SECONDS).get(res);
    ConfigEntry retention = cfg.get("retention.ms");
    assertEquals("12345", retention.value());
    assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, retention.source());
    ConfigEntry cleanup = cfg.get("cleanup.policy");
    assertEquals("delete", cleanup.value());
    assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, cleanup.source());

    Node node = admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).iterator().next();
    ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, node.idString());
    Config bcfg = admin.describeConfigs(List.of(broker)).all().get(T, TimeUnit.SECONDS).get(broker);
    assertEquals("1048588", bcfg.get("message.max.bytes").value());
    assertEquals("false", bcfg.get("auto.create.topics.enable").value());
  }

  @Test
  void listOffsetsEarliestLatestMaxTimestampAndByTime() throws Exception {
    String topic = createTopic("admin-offsets", 1);
    produce(topic, 1_000L, 3_000L, 2_000L);
    assertEquals(0, offset(topic, OffsetSpec.earliest()).offset());
    assertEquals(3, offset(topic, OffsetSpec.latest()).offset());
    ListOffsetsResultInfo max = offset(topic, OffsetSpec.maxTimestamp());
    assertEquals(1, max.offset());
    assertEquals(3_000L, max.timestamp());
    ListOffsetsResultInfo byTime = offset(topic, OffsetSpec.forTimestamp(2_500L));
    assertEquals(1, byTime.offset());
    assertEquals(3_000L, byTime.timestamp());
  }

  @Test
  void deleteRecordsMovesTheLogStartOffset() throws Exception {
    String topic = createTopic("admin-delrec", 1);
    produce(topic, 1L, 2L, 3L, 4L, 5L, 6L, 7L, 8L, 9L, 10L);
    TopicPartition tp = new TopicPartition(topic, 0);
    long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4)))
        .lowWatermarks().get(tp).get(T, TimeUnit.SECONDS).lowWatermark();
    assertEquals(4, low);
    assertEquals(4, offset(topic, OffsetSpec.earliest()).offset());
    assertEquals(10, offset(topic, OffsetSpec.latest()).offset());
  }

  @Test
  void describeClusterShowsTheOneBroker() throws Exception {
    DescribeClusterResult r = admin.describeCluster();
    List<Node> nodes = new ArrayList<>(r.nodes().get(T, TimeUnit.SECONDS));
    assertEquals(1, nodes.size());
    String[] hostPort = bootstrap().split(":");
    assertEquals(Integer.parseInt(hostPort[1]), nodes.get(0).port());
    assertNotNull(r.clusterId().get(T, TimeUnit.SECONDS));
    assertNotNull(r.controller().get(T, TimeUnit.SECONDS));
  }

  @Test
  void creatingAnExistingTopicRaisesTopicExists() throws Exception {
    String topic = createTopic("admin-exists", 1);
    Throwable e = causeOf(() -> admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)))
        .all().get(T, TimeUnit.SECONDS));
    assertInstanceOf(TopicExistsException.class, e);
  }

  @Test
  void invalidTopicNamesRaiseInvalidTopic() {
    for (String name : List.of("bad/name", "has space", "..", "x".repeat(250))) {
      Throwable e = causeOf(() -> admin.createTopics(List.of(new NewTopic(name, 1, (short) 1)))
          .all().get(T, TimeUnit.SECONDS));
      assertInstanceOf(InvalidTopicException.class, e, "topic name '" + name + "'");
    }
  }

  @Test
  void unknownTopicRaisesUnknownTopicOrPartition() {
    String topic = uniqueTopic("admin-missing");
    assertInstanceOf(UnknownTopicOrPartitionException.class, causeOf(() -> describe(topic)));
    assertInstanceOf(UnknownTopicOrPartitionException.class,
        causeOf(() -> admin.deleteTopics(List.of(topic)).all().get(T, TimeUnit.SECONDS)));
    ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
    assertInstanceOf(UnknownTopicOrPartitionException.class,
        causeOf(() -> admin.describeConfigs(List.of(res)).all().get(T, TimeUnit.SECONDS)));
  }
}
