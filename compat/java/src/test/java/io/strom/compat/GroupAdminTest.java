package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Admin calls about groups, configs, producers, transactions and log dirs. */
@Tag("fast")
class GroupAdminTest extends CompatTest {
  private static final long T = 30;

  private void produce(String topic, int n) throws Exception {
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(producerProps())) {
      for (int i = 0; i < n; i++) {
        p.send(new ProducerRecord<>(topic, 0, null, ("v" + i).getBytes(StandardCharsets.UTF_8)));
      }
      p.flush();
    }
  }

  private Set<String> consumerGroupIds() throws Exception {
    Collection<GroupListing> all = admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(T, TimeUnit.SECONDS);
    return all.stream().map(GroupListing::groupId).collect(Collectors.toSet());
  }

  @Test
  void listDescribeDeleteConsumerGroups() throws Exception {
    String topic = createTopic("ga-groups", 1);
    produce(topic, 3);
    String group = uniqueTopic("g-admin");
    Properties p = consumerProps(group);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.subscribe(List.of(topic));
      long end = System.nanoTime() + DEADLINE.toNanos();
      while (c.assignment().isEmpty() && System.nanoTime() < end) {
        c.poll(Duration.ofMillis(100));
      }
      c.commitSync(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(2)));
      ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all()
          .get(T, TimeUnit.SECONDS).get(group);
      assertEquals(GroupState.STABLE, d.groupState());
      assertEquals(1, d.members().size());
      assertEquals(Set.of(new TopicPartition(topic, 0)),
          d.members().iterator().next().assignment().topicPartitions());
      assertTrue(consumerGroupIds().contains(group));
    }
    ConsumerGroupDescription empty = admin.describeConsumerGroups(List.of(group)).all()
        .get(T, TimeUnit.SECONDS).get(group);
    assertEquals(GroupState.EMPTY, empty.groupState());
    admin.deleteConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS);
    assertFalse(consumerGroupIds().contains(group));
  }

  @Test
  void listAndAlterConsumerGroupOffsets() throws Exception {
    String topic = createTopic("ga-offsets", 1);
    produce(topic, 10);
    String group = uniqueTopic("g-alter");
    TopicPartition tp = new TopicPartition(topic, 0);
    admin.alterConsumerGroupOffsets(group, Map.of(tp, new OffsetAndMetadata(3))).all().get(T, TimeUnit.SECONDS);
    Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group)
        .partitionsToOffsetAndMetadata().get(T, TimeUnit.SECONDS);
    assertEquals(3, got.get(tp).offset());
    admin.alterConsumerGroupOffsets(group, Map.of(tp, new OffsetAndMetadata(8))).all().get(T, TimeUnit.SECONDS);
    got = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(T, TimeUnit.SECONDS);
    assertEquals(8, got.get(tp).offset());
    admin.deleteConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS);
  }

  @Test
  void incrementalAlterTopicConfig() throws Exception {
    String topic = createTopic("ga-alter", 1);
    ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
    admin.incrementalAlterConfigs(Map.of(res, List.of(
        new AlterConfigOp(new ConfigEntry("retention.ms", "5555"), AlterConfigOp.OpType.SET))))
        .all().get(T, TimeUnit.SECONDS);
    // Kafka applies config changes through its metadata log: poll until the change shows.
    assertTrue(eventually(() -> "5555".equals(topicEntry(res, "retention.ms").value())), "retention.ms set");
    admin.incrementalAlterConfigs(Map.of(res, List.of(
        new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
        .all().get(T, TimeUnit.SECONDS);
    assertTrue(eventually(() -> topicEntry(res, "retention.ms").source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG),
        "retention.ms back to its default");
    assertEquals("604800000", topicEntry(res, "retention.ms").value());
  }

  private ConfigEntry topicEntry(ConfigResource res, String key) {
    try {
      return admin.describeConfigs(List.of(res)).all().get(T, TimeUnit.SECONDS).get(res).get(key);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  /** Per-broker (resource name = node id) and cluster-default (empty name) dynamic broker configs. */
  @ParameterizedTest(name = "{0} on {1}")
  @CsvSource({
      "log.retention.ms, node, 123456789, DYNAMIC_BROKER_CONFIG",
      "log.retention.ms, cluster-default, 123456789, DYNAMIC_DEFAULT_BROKER_CONFIG",
      "log.cleaner.threads, node, 2, DYNAMIC_BROKER_CONFIG"})
  void incrementalAlterBrokerConfig(String key, String scope, String value, ConfigEntry.ConfigSource source)
      throws Exception {
    Node node = admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).iterator().next();
    ConfigResource target = new ConfigResource(ConfigResource.Type.BROKER,
        scope.equals("node") ? node.idString() : "");
    ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, node.idString());
    try {
      admin.incrementalAlterConfigs(Map.of(target, List.of(
          new AlterConfigOp(new ConfigEntry(key, value), AlterConfigOp.OpType.SET))))
          .all().get(T, TimeUnit.SECONDS);
      assertTrue(eventually(() -> {
        try {
          ConfigEntry e = admin.describeConfigs(List.of(broker)).all().get(T, TimeUnit.SECONDS).get(broker).get(key);
          return value.equals(e.value()) && e.source() == source;
        } catch (Exception e) {
          return false;
        }
      }), key + " set on " + scope);
    } finally {
      causeOf(() -> admin.incrementalAlterConfigs(Map.of(target, List.of(
          new AlterConfigOp(new ConfigEntry(key, ""), AlterConfigOp.OpType.DELETE))))
          .all().get(T, TimeUnit.SECONDS));
    }
  }

  @Test
  void describeProducersShowsTheIdempotentProducer() throws Exception {
    String topic = createTopic("ga-producers", 1);
    produce(topic, 4); // the default producer is idempotent
    TopicPartition tp = new TopicPartition(topic, 0);
    List<ProducerState> states = admin.describeProducers(List.of(tp)).partitionResult(tp)
        .get(T, TimeUnit.SECONDS).activeProducers();
    assertEquals(1, states.size());
    assertEquals(3, states.get(0).lastSequence());
  }

  @Test
  void listAndDescribeTransactions() throws Exception {
    String topic = createTopic("ga-tx", 1);
    String txId = uniqueTopic("ga-tx");
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(TransactionTest.txProps(txId))) {
      p.initTransactions();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, 0, null, new byte[] {1}));
      p.commitTransaction();
    }
    Set<String> ids = admin.listTransactions().all().get(T, TimeUnit.SECONDS).stream()
        .map(TransactionListing::transactionalId).collect(Collectors.toSet());
    assertTrue(ids.contains(txId), "listTransactions has " + txId);
    TransactionDescription d = admin.describeTransactions(List.of(txId)).description(txId).get(T, TimeUnit.SECONDS);
    assertEquals(TransactionState.COMPLETE_COMMIT, d.state());
  }

  @Test
  void describeLogDirsShowsThePartition() throws Exception {
    String topic = createTopic("ga-logdirs", 1);
    produce(topic, 5);
    Node node = admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).iterator().next();
    Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(node.id())).allDescriptions()
        .get(T, TimeUnit.SECONDS).get(node.id());
    assertEquals(1, dirs.size());
    LogDirDescription dir = dirs.values().iterator().next();
    assertNotNull(dir.replicaInfos().get(new TopicPartition(topic, 0)), "partition in " + dirs.keySet());
    assertTrue(dir.replicaInfos().get(new TopicPartition(topic, 0)).size() > 0);
  }

  @Test
  void replicationFactorAboveBrokerCountRaisesInvalidReplicationFactor() {
    String topic = uniqueTopic("ga-rf");
    Throwable e = causeOf(() -> admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3)))
        .all().get(T, TimeUnit.SECONDS));
    assertInstanceOf(InvalidReplicationFactorException.class, e);
  }
}
