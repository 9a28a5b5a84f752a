package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.InvalidReplicaAssignmentException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.NoReassignmentInProgressException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Admin calls that need a 3-broker cluster: partition reassignment and preferred leader election.
 * Runs only with -Dgroups=cluster against `run_broker.py strom-cluster` / `kafka-cluster`, which
 * start the brokers with auto.leader.rebalance.enable=false (a moved leader stays moved).
 */
@Tag("cluster")
class ClusterAdminTest extends CompatTest {
  private static final long T = 30;
  private List<Integer> ids;

  @BeforeEach
  void threeBrokers() throws Exception {
    // KRaft brokers register with the controller quorum a moment after they serve.
    assertTrue(eventually(() -> brokerIds().size() == 3), "3 brokers registered, got " + brokerIds());
    ids = brokerIds();
  }

  private List<Integer> brokerIds() {
    try {
      return admin.describeCluster().nodes().get(T, TimeUnit.SECONDS).stream()
          .map(Node::id).sorted().collect(Collectors.toList());
    } catch (Exception e) {
      return List.of();
    }
  }

  /**
   * The partition as describeTopics shows it. The admin client asks any broker, and one that has
   * not applied the topic's creation yet answers UnknownTopicOrPartition (Kafka's brokers too):
   * asked again until the deadline.
   */
  private TopicPartitionInfo partition(String topic, int p) {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (true) {
      try {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(T, TimeUnit.SECONDS).get(topic);
        return d.partitions().get(p);
      } catch (ExecutionException e) {
        if (!(e.getCause() instanceof UnknownTopicOrPartitionException) || System.nanoTime() > end) {
          throw new IllegalStateException(e);
        }
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
      try {
        Thread.sleep(100); // poll interval, not synchronisation
      } catch (InterruptedException e) {
        throw new IllegalStateException(e);
      }
    }
  }

  private static List<Integer> idsOf(List<Node> nodes) {
    return nodes.stream().map(Node::id).collect(Collectors.toList());
  }

  private static Set<Integer> idSet(List<Node> nodes) {
    return new HashSet<>(idsOf(nodes));
  }

  /** Replicas (in order) and ISR (as a set) as describeTopics shows them. */
  private boolean placed(String topic, int p, List<Integer> replicas, int leader) {
    TopicPartitionInfo info = partition(topic, p);
    return idsOf(info.replicas()).equals(replicas)
        && idSet(info.isr()).equals(new HashSet<>(replicas))
        && info.leader() != null && info.leader().id() == leader;
  }

  private boolean noReassignment(TopicPartition tp) {
    try {
      Map<TopicPartition, PartitionReassignment> r = admin.listPartitionReassignments(Set.of(tp))
          .reassignments().get(T, TimeUnit.SECONDS);
      return r.isEmpty();
    } catch (Exception e) {
      return false;
    }
  }

  private void reassign(TopicPartition tp, List<Integer> target) throws Exception {
    admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(target))))
        .all().get(T, TimeUnit.SECONDS);
  }

  private void produce(String topic, int n) throws Exception {
    var p = producerProps();
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
      for (int i = 0; i < n; i++) {
        producer.send(new ProducerRecord<>(topic, 0, null, ("r" + i).getBytes(StandardCharsets.UTF_8))).get(T, TimeUnit.SECONDS);
      }
    }
  }

  @Test
  void reassignmentMovesTheReplicasAndKeepsTheRecords() throws Exception {
    int a = ids.get(0);
    int b = ids.get(1);
    int c = ids.get(2);
    String topic = createTopic("cl-move", Map.of(0, List.of(a, b)));
    assertTrue(eventually(() -> placed(topic, 0, List.of(a, b), a)), "created on [a, b]: " + partition(topic, 0));
    produce(topic, 20);
    TopicPartition tp = new TopicPartition(topic, 0);

    reassign(tp, List.of(b, c));
    assertTrue(eventually(() -> noReassignment(tp) && placed(topic, 0, List.of(b, c), b)),
        "moved to [b, c] with leader b: " + partition(topic, 0));
    List<String> values = new ArrayList<>();
    readAll(topic, 1, 20).forEach(r -> values.add(new String(r.value(), StandardCharsets.UTF_8)));
    assertEquals(20, values.size(), "records after the move: " + values);
    assertEquals("r0", values.get(0));
    assertEquals("r19", values.get(19));

    // Raising the replication factor is a reassignment too.
    reassign(tp, List.of(b, c, a));
    assertTrue(eventually(() -> noReassignment(tp) && placed(topic, 0, List.of(b, c, a), b)),
        "grown to [b, c, a]: " + partition(topic, 0));
    assertTrue(admin.listPartitionReassignments().reassignments().get(T, TimeUnit.SECONDS).keySet().stream()
        .noneMatch(t -> t.topic().equals(topic)), "no reassignment of " + topic + " listed");
  }

  /** Sets (value) or deletes (null) a dynamic config on every broker. */
  private void brokerConfigs(Map<String, String> entries) throws Exception {
    Map<ConfigResource, java.util.Collection<AlterConfigOp>> ops = new java.util.HashMap<>();
    for (int id : ids) {
      List<AlterConfigOp> list = new ArrayList<>();
      entries.forEach((k, v) -> list.add(v == null
          ? new AlterConfigOp(new ConfigEntry(k, ""), AlterConfigOp.OpType.DELETE)
          : new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
      ops.put(new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(id)), list);
    }
    admin.incrementalAlterConfigs(ops).all().get(T, TimeUnit.SECONDS);
  }

  private boolean throttledEverywhere(ConfigResource topic) {
    try {
      List<ConfigResource> all = new ArrayList<>();
      all.add(topic);
      ids.forEach(id -> all.add(new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(id))));
      var configs = admin.describeConfigs(all).all().get(T, TimeUnit.SECONDS);
      for (ConfigResource r : all) {
        String key = r.type() == ConfigResource.Type.TOPIC
            ? "leader.replication.throttled.replicas" : "leader.replication.throttled.rate";
        String want = r.type() == ConfigResource.Type.TOPIC ? "*" : "1024";
        if (!want.equals(configs.get(r).get(key).value())) {
          return false;
        }
      }
      return true;
    } catch (Exception e) {
      return false;
    }
  }

  /**
   * A reassignment held back by a replication throttle (Kafka's leader/follower
   * .replication.throttled.rate and .replicas configs) is listed with its adding replica, and a
   * cancel puts the partition back on its old replicas.
   */
  @Test
  void aThrottledReassignmentIsListedAndCanBeCancelled() throws Exception {
    int a = ids.get(0);
    int b = ids.get(1);
    String topic = createTopic("cl-throttle", Map.of(0, List.of(a)));
    TopicPartition tp = new TopicPartition(topic, 0);
    // More than one replica fetch (replica.fetch.max.bytes, 1 MiB): the first fetch uses up the quota.
    var p = producerProps();
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    byte[] value = new byte[1024];
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
      for (int i = 0; i < 4096; i++) {
        producer.send(new ProducerRecord<>(topic, 0, null, value));
      }
      producer.flush();
    }
    ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
    admin.incrementalAlterConfigs(Map.of(res, List.of(
        new AlterConfigOp(new ConfigEntry("leader.replication.throttled.replicas", "*"), AlterConfigOp.OpType.SET),
        new AlterConfigOp(new ConfigEntry("follower.replication.throttled.replicas", "*"), AlterConfigOp.OpType.SET))))
        .all().get(T, TimeUnit.SECONDS);
    Map<String, String> rates = new java.util.HashMap<>();
    rates.put("leader.replication.throttled.rate", "1024");
    rates.put("follower.replication.throttled.rate", "1024");
    brokerConfigs(rates);
    try {
      // Kafka applies configs through its metadata log: wait until every broker shows them.
      assertTrue(eventually(() -> throttledEverywhere(res)), "throttle configs applied");
      reassign(tp, List.of(a, b));
      PartitionReassignment r = admin.listPartitionReassignments(Set.of(tp)).reassignments()
          .get(T, TimeUnit.SECONDS).get(tp);
      assertTrue(r != null, "the throttled reassignment is under way");
      assertEquals(List.of(a, b), r.replicas());
      assertEquals(List.of(b), r.addingReplicas());
      assertEquals(List.of(), r.removingReplicas());
      assertEquals(Set.of(a), idSet(partition(topic, 0).isr()), "b has not caught up");

      admin.alterPartitionReassignments(Map.of(tp, Optional.empty())).all().get(T, TimeUnit.SECONDS);
      assertTrue(eventually(() -> noReassignment(tp) && placed(topic, 0, List.of(a), a)),
          "back on [a] after the cancel: " + partition(topic, 0));
    } finally {
      rates.replaceAll((k, v) -> null);
      brokerConfigs(rates);
    }
  }

  @Test
  void preferredLeaderElectionAfterTheLeaderMoved() throws Exception {
    int a = ids.get(0);
    int b = ids.get(1);
    int c = ids.get(2);
    String topic = createTopic("cl-elect", Map.of(0, List.of(a, b, c)));
    TopicPartition tp = new TopicPartition(topic, 0);
    assertTrue(eventually(() -> placed(topic, 0, List.of(a, b, c), a)), "leader a: " + partition(topic, 0));
    produce(topic, 5);
    // Move the leader away: take a out of the replicas (b leads), then add it back first in line.
    reassign(tp, List.of(b, c));
    assertTrue(eventually(() -> noReassignment(tp) && placed(topic, 0, List.of(b, c), b)), "b leads: " + partition(topic, 0));
    reassign(tp, List.of(a, b, c));
    assertTrue(eventually(() -> noReassignment(tp) && placed(topic, 0, List.of(a, b, c), b)),
        "a back in the ISR, b still leads: " + partition(topic, 0));

    Map<TopicPartition, Optional<Throwable>> result = admin.electLeaders(ElectionType.PREFERRED, Set.of(tp))
        .partitions().get(T, TimeUnit.SECONDS);
    assertEquals(Optional.empty(), result.get(tp));
    assertTrue(eventually(() -> placed(topic, 0, List.of(a, b, c), a)), "a leads again: " + partition(topic, 0));

    // The preferred replica leads already: nothing to do, which Kafka reports as an error.
    result = admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get(T, TimeUnit.SECONDS);
    assertInstanceOf(ElectionNotNeededException.class, result.get(tp).orElse(null));
    // An unclean election of a partition that has a leader is not needed either.
    result = admin.electLeaders(ElectionType.UNCLEAN, Set.of(tp)).partitions().get(T, TimeUnit.SECONDS);
    assertInstanceOf(ElectionNotNeededException.class, result.get(tp).orElse(null));
  }

  @Test
  void electLeadersOfAnUnknownPartitionFails() throws Exception {
    String topic = createTopic("cl-elect-unknown", Map.of(0, List.of(ids.get(0), ids.get(1))));
    TopicPartition missing = new TopicPartition(topic, 7);
    TopicPartition noTopic = new TopicPartition(uniqueTopic("cl-none"), 0);
    Map<TopicPartition, Optional<Throwable>> result = admin.electLeaders(ElectionType.PREFERRED,
        Set.of(missing, noTopic)).partitions().get(T, TimeUnit.SECONDS);
    assertInstanceOf(UnknownTopicOrPartitionException.class, result.get(missing).orElse(null));
    assertInstanceOf(UnknownTopicOrPartitionException.class, result.get(noTopic).orElse(null));
  }

  @Test
  void reassignmentErrorsAreKafkasExceptions() throws Exception {
    int a = ids.get(0);
    int b = ids.get(1);
    String topic = createTopic("cl-bad", Map.of(0, List.of(a, b)));
    TopicPartition tp = new TopicPartition(topic, 0);
    assertTrue(eventually(() -> placed(topic, 0, List.of(a, b), a)), "created: " + partition(topic, 0));

    assertInstanceOf(InvalidReplicaAssignmentException.class, causeOf(() -> reassign(tp, List.of(a, 99))),
        "a broker that does not exist");
    assertInstanceOf(InvalidReplicaAssignmentException.class, causeOf(() -> reassign(tp, List.of(a, a))),
        "a broker twice");
    assertInstanceOf(UnknownTopicOrPartitionException.class,
        causeOf(() -> reassign(new TopicPartition(topic, 5), List.of(a, b))), "a partition that does not exist");
    assertInstanceOf(UnknownTopicOrPartitionException.class,
        causeOf(() -> reassign(new TopicPartition(uniqueTopic("cl-none"), 0), List.of(a, b))),
        "a topic that does not exist");
    assertInstanceOf(NoReassignmentInProgressException.class,
        causeOf(() -> admin.alterPartitionReassignments(Map.of(tp, Optional.empty())).all().get(T, TimeUnit.SECONDS)),
        "cancelling when nothing is under way");
    assertTrue(placed(topic, 0, List.of(a, b), a), "unchanged: " + partition(topic, 0));
    assertTrue(noReassignment(tp));
  }

  @Test
  void topicCreationOnTheClusterChecksReplicas() throws Exception {
    String topic = createTopic("cl-rf3", 2, Map.of());
    assertEquals(1, partition(topic, 0).replicas().size()); // createTopic asks for replication factor 1
    String wide = uniqueTopic("cl-rf4");
    assertInstanceOf(InvalidReplicationFactorException.class,
        causeOf(() -> admin.createTopics(List.of(new NewTopic(wide, 1, (short) 4))).all().get(T, TimeUnit.SECONDS)));
    String unknownBroker = uniqueTopic("cl-b99");
    assertInstanceOf(InvalidReplicaAssignmentException.class,
        causeOf(() -> admin.createTopics(List.of(new NewTopic(unknownBroker, Map.of(0, List.of(ids.get(0), 99)))))
            .all().get(T, TimeUnit.SECONDS)));
    String three = createTopic("cl-rf3", Map.of(0, ids, 1, List.of(ids.get(2), ids.get(0), ids.get(1))));
    assertTrue(eventually(() -> placed(three, 0, ids, ids.get(0))
        && placed(three, 1, List.of(ids.get(2), ids.get(0), ids.get(1)), ids.get(2))),
        "both partitions fully in sync: " + partition(three, 0) + " " + partition(three, 1));
  }
}
