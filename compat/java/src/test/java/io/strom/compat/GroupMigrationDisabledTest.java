package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * KIP-848's migration policy set to `disabled` on the broker (group.consumer.migration.policy):
 * a live group keeps its protocol and the member that speaks the other one is refused, while an
 * empty group still changes protocol. Needs a broker started with that override: the tag
 * "migration-disabled" is excluded by default and run by tests/integration/java.
 */
@Tag("migration-disabled")
class GroupMigrationDisabledTest extends CompatTest {
  private static final long T = 30;

  private KafkaConsumer<byte[], byte[]> member(String group, String protocol, String topic) {
    Properties p = consumerProps(group);
    p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
    c.subscribe(List.of(topic));
    return c;
  }

  private ConsumerGroupDescription describe(String group) {
    try {
      return admin.describeConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS).get(group);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  /** Polls until the consumer owns partitions; fails the test if its poll throws. */
  private boolean assigned(KafkaConsumer<byte[], byte[]> c) {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (System.nanoTime() < end && c.assignment().isEmpty()) {
      c.poll(Duration.ofMillis(50));
    }
    return !c.assignment().isEmpty();
  }

  /** Polls the newcomer (and the incumbent, so it stays in the group) until the newcomer's poll throws. */
  private static Throwable refusal(KafkaConsumer<byte[], byte[]> incumbent, KafkaConsumer<byte[], byte[]> newcomer) {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (System.nanoTime() < end) {
      incumbent.poll(Duration.ofMillis(50));
      try {
        newcomer.poll(Duration.ofMillis(50));
      } catch (RuntimeException e) {
        return e;
      }
      if (!newcomer.assignment().isEmpty()) {
        return null; // it joined
      }
    }
    return null;
  }

  private void refused(String first, String second, GroupType type, Class<? extends Throwable> error)
      throws Exception {
    String topic = createTopic("mig-off-" + second, 2);
    String group = uniqueTopic("g-mig-off-" + second);
    try (KafkaConsumer<byte[], byte[]> incumbent = member(group, first, topic)) {
      assertTrue(assigned(incumbent), "the first member joins");
      try (KafkaConsumer<byte[], byte[]> newcomer = member(group, second, topic)) {
        Throwable e = refusal(incumbent, newcomer);
        assertInstanceOf(error, e, "a " + second + " member joining a live " + first + " group");
      }
      ConsumerGroupDescription d = describe(group);
      assertEquals(type, d.type());
      assertEquals(1, d.members().size(), "only the first member: " + d);
      assertEquals(2, incumbent.assignment().size());
    }
  }

  @Test
  void aConsumerProtocolMemberCannotJoinALiveClassicGroup() throws Exception {
    refused("classic", "consumer", GroupType.CLASSIC,
        org.apache.kafka.common.errors.GroupIdNotFoundException.class);
  }

  @Test
  void aClassicMemberCannotJoinALiveConsumerGroup() throws Exception {
    refused("consumer", "classic", GroupType.CONSUMER,
        org.apache.kafka.common.errors.InconsistentGroupProtocolException.class);
  }

  @Test
  void anEmptyGroupStillChangesProtocol() throws Exception {
    String topic = createTopic("mig-off-empty", 2);
    String group = uniqueTopic("g-mig-off-empty");
    try (KafkaConsumer<byte[], byte[]> c = member(group, "classic", topic)) {
      assertTrue(assigned(c));
      assertEquals(GroupType.CLASSIC, describe(group).type());
    }
    assertTrue(eventually(() -> describe(group).groupState() == GroupState.EMPTY));
    try (KafkaConsumer<byte[], byte[]> c = member(group, "consumer", topic)) {
      assertTrue(assigned(c));
      assertEquals(GroupType.CONSUMER, describe(group).type());
    }
  }
}
