package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * KIP-848's online migration: a live classic group upgraded to group.protocol=consumer member by
 * member, and a consumer group downgraded back, under the broker's default
 * group.consumer.migration.policy (bidirectional in Kafka 4.4). Records are produced only while
 * the group is stable and every member commits what it read, so each record is read exactly once
 * across all the conversions: lost offsets would replay records, a broken assignment would miss
 * some.
 */
@Tag("migration")
class GroupMigrationTest extends CompatTest {
  private static final int PARTITIONS = 4;
  private static final int PER_PHASE = 40;
  private static final long T = 30;

  private String topic;
  private String group;
  private final Map<String, Integer> seen = new HashMap<>();
  private int produced;

  /** One consumer of the group, polled from the test's thread like every other member. */
  private final class Member implements AutoCloseable {
    final String protocol;
    final KafkaConsumer<byte[], byte[]> consumer;

    Member(String protocol) {
      this.protocol = protocol;
      Properties p = consumerProps(group);
      p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
      p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
      consumer = new KafkaConsumer<>(p);
      consumer.subscribe(List.of(topic));
    }

    void poll() {
      ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
      for (ConsumerRecord<byte[], byte[]> r : records) {
        seen.merge(new String(r.value(), StandardCharsets.UTF_8), 1, Integer::sum);
      }
      if (!records.isEmpty()) {
        consumer.commitSync();
      }
    }

    Set<TopicPartition> assignment() {
      return consumer.assignment();
    }

    @Override
    public void close() {
      consumer.close(); // leaves the group (LeaveGroup or a leave heartbeat)
    }

    @Override
    public String toString() {
      return protocol + assignment();
    }
  }

  /** Polls every member in turn until the condition holds or the deadline passes. */
  private static boolean pollUntil(List<Member> members, BooleanSupplier done) {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (System.nanoTime() < end) {
      for (Member m : members) {
        m.poll();
      }
      if (done.getAsBoolean()) {
        return true;
      }
    }
    return false;
  }

  private ConsumerGroupDescription describe() {
    try {
      return admin.describeConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS).get(group);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  /** Every partition owned by exactly one member, none idle, and the group stable with this type. */
  private boolean settled(List<Member> members, GroupType type) {
    Set<TopicPartition> all = new HashSet<>();
    int owned = 0;
    for (Member m : members) {
      if (m.assignment().isEmpty()) {
        return false;
      }
      all.addAll(m.assignment());
      owned += m.assignment().size();
    }
    if (all.size() != PARTITIONS || owned != PARTITIONS) {
      return false;
    }
    ConsumerGroupDescription d = describe();
    return d.type() == type && d.groupState() == GroupState.STABLE && d.members().size() == members.size();
  }

  private void awaitSettled(List<Member> members, GroupType type) {
    assertTrue(pollUntil(members, () -> settled(members, type)),
        "members " + members + " and group " + type + ", got " + describe());
  }

  /** Which members the broker says use the consumer protocol (KIP-1099's `upgraded`). */
  private List<Boolean> upgradedFlags() {
    return describe().members().stream().map(MemberDescription::upgraded)
        .map(o -> o.orElse(null)).sorted((x, y) -> String.valueOf(x).compareTo(String.valueOf(y)))
        .collect(Collectors.toList());
  }

  /** Produces a phase of records and checks the members read each of them exactly once. */
  private void produceAndReadOnce(List<Member> members, String phase) throws Exception {
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(producerProps())) {
      for (int i = 0; i < PER_PHASE; i++) {
        p.send(new ProducerRecord<>(topic, i % PARTITIONS, null,
            (phase + "-" + i).getBytes(StandardCharsets.UTF_8)));
      }
      p.flush();
    }
    produced += PER_PHASE;
    assertTrue(pollUntil(members, () -> seen.size() == produced),
        phase + ": distinct records read " + seen.size() + " of " + produced);
    List<String> twice = seen.entrySet().stream().filter(e -> e.getValue() != 1).map(Map.Entry::getKey)
        .sorted().collect(Collectors.toList());
    assertEquals(List.of(), twice, phase + ": records read more than once");
  }

  private void setUpTopicAndGroup(String prefix) throws Exception {
    topic = createTopic(prefix, PARTITIONS);
    group = uniqueTopic("g-" + prefix);
  }

  /** The group's committed offsets add up to every record produced. */
  private void assertCommittedEverything() throws Exception {
    Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
        .partitionsToOffsetAndMetadata().get(T, TimeUnit.SECONDS);
    long sum = offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
    assertEquals(produced, sum, "committed offsets " + offsets);
  }

  private static void closeAll(List<Member> members) {
    for (Member m : members) {
      m.close();
    }
  }

  @Test
  void upgradeALiveClassicGroupMemberByMember() throws Exception {
    setUpTopicAndGroup("mig-up");
    List<Member> members = new ArrayList<>(List.of(new Member("classic"), new Member("classic")));
    try {
      awaitSettled(members, GroupType.CLASSIC);
      produceAndReadOnce(members, "classic");

      members.remove(1).close();
      members.add(new Member("consumer")); // the first upgraded member turns the group into a consumer group
      awaitSettled(members, GroupType.CONSUMER);
      assertEquals(List.of(false, true), upgradedFlags(), "one classic and one consumer-protocol member");
      produceAndReadOnce(members, "mixed");

      members.remove(0).close();
      members.add(new Member("consumer"));
      awaitSettled(members, GroupType.CONSUMER);
      assertEquals(List.of(true, true), upgradedFlags());
      produceAndReadOnce(members, "consumer");
    } finally {
      closeAll(members);
    }
    assertCommittedEverything();
  }

  @Test
  void downgradeALiveConsumerGroupMemberByMember() throws Exception {
    setUpTopicAndGroup("mig-down");
    List<Member> members = new ArrayList<>(List.of(new Member("consumer"), new Member("consumer")));
    try {
      awaitSettled(members, GroupType.CONSUMER);
      produceAndReadOnce(members, "consumer");

      members.remove(1).close();
      members.add(new Member("classic")); // a classic member joins the consumer group
      awaitSettled(members, GroupType.CONSUMER);
      assertEquals(List.of(false, true), upgradedFlags(), "one classic and one consumer-protocol member");
      produceAndReadOnce(members, "mixed");

      // The last consumer-protocol member leaves: the group becomes a classic group again.
      members.remove(0).close();
      assertTrue(pollUntil(members, () -> settled(members, GroupType.CLASSIC)),
          "downgraded to a classic group, got " + describe());
      members.add(new Member("classic"));
      awaitSettled(members, GroupType.CLASSIC);
      assertEquals(Optional.empty(), describe().members().iterator().next().upgraded(),
          "classic groups' members carry no upgraded flag");
      produceAndReadOnce(members, "classic");
    } finally {
      closeAll(members);
    }
    assertCommittedEverything();
  }

  @Test
  void anEmptyGroupChangesProtocolWithItsOffsets() throws Exception {
    setUpTopicAndGroup("mig-empty");
    String[] protocols = {"classic", "consumer", "classic"};
    GroupType[] types = {GroupType.CLASSIC, GroupType.CONSUMER, GroupType.CLASSIC};
    for (int i = 0; i < protocols.length; i++) {
      List<Member> members = List.of(new Member(protocols[i]));
      try {
        awaitSettled(members, types[i]);
        produceAndReadOnce(members, protocols[i] + i);
      } finally {
        closeAll(members);
      }
      assertTrue(eventually(() -> describe().groupState() == GroupState.EMPTY), "empty, got " + describe());
      assertCommittedEverything();
    }
  }
}
