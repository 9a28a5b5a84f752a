package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Consumer groups of the Java client: every record exactly once across the members. */
class ConsumerGroupTest extends CompatTest {

  @Test
  void classicGroupOfThreeConsumesEveryRecordOnce() throws Exception {
    groupOfThree("classic");
  }

  @Test
  void consumerProtocolGroupOfThreeConsumesEveryRecordOnce() throws Exception {
    groupOfThree("consumer"); // KIP-848: ConsumerGroupHeartbeat, server-side assignment
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void rebalancesOnJoinAndLeave(String protocol) throws Exception {
    String topic = createTopic("rebal-" + protocol, 4);
    String group = uniqueTopic("g-rebal-" + protocol);
    Properties p = consumerProps(group);
    p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
    try (KafkaConsumer<byte[], byte[]> first = new KafkaConsumer<>(p)) {
      first.subscribe(List.of(topic));
      assertTrue(pollUntil(List.of(first), () -> first.assignment().size() == 4), "first member owns all 4");
      try (KafkaConsumer<byte[], byte[]> second = new KafkaConsumer<>(p)) {
        second.subscribe(List.of(topic));
        assertTrue(pollUntil(List.of(first, second),
            () -> first.assignment().size() == 2 && second.assignment().size() == 2),
            "2 + 2 after the join, got " + first.assignment() + " / " + second.assignment());
      }
      assertTrue(pollUntil(List.of(first), () -> first.assignment().size() == 4), "all 4 back after the leave");
    }
  }

  /** Polls every consumer in turn (each from this one thread) until the condition holds. */
  private static boolean pollUntil(List<KafkaConsumer<byte[], byte[]>> consumers, BooleanSupplier done) {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (System.nanoTime() < end) {
      for (KafkaConsumer<byte[], byte[]> c : consumers) {
        c.poll(Duration.ofMillis(50));
      }
      if (done.getAsBoolean()) {
        return true;
      }
    }
    return false;
  }

  private void groupOfThree(String protocol) throws Exception {
    int partitions = 3;
    int records = 300;
    String topic = createTopic("group-" + protocol, partitions);
    String group = uniqueTopic("g-" + protocol);
    AtomicBoolean stop = new AtomicBoolean();
    Map<Integer, Set<TopicPartition>> assignments = new ConcurrentHashMap<>();
    Map<String, AtomicInteger> seen = new ConcurrentHashMap<>();
    Map<Integer, AtomicInteger> perMember = new ConcurrentHashMap<>();
    ExecutorService pool = Executors.newFixedThreadPool(3);
    List<Future<?>> members = new ArrayList<>();
    try {
      for (int m = 0; m < 3; m++) {
        int member = m;
        perMember.put(member, new AtomicInteger());
        members.add(pool.submit(() -> {
          Properties p = consumerProps(group);
          p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
          try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic));
            while (!stop.get()) {
              for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                seen.computeIfAbsent(new String(r.value(), StandardCharsets.UTF_8), k -> new AtomicInteger())
                    .incrementAndGet();
                perMember.get(member).incrementAndGet();
              }
              assignments.put(member, Set.copyOf(c.assignment()));
              c.commitSync();
            }
          }
          return null;
        }));
      }
      // Produce only once the group is stable (one partition each), so no rebalance can replay records.
      assertTrue(eventually(() -> assignments.size() == 3
          && assignments.values().stream().allMatch(a -> a.size() == 1)),
          "3 members with one partition each, got " + assignments);
      try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
        for (int i = 0; i < records; i++) {
          producer.send(new ProducerRecord<>(topic, i % partitions, null,
              ("value-" + i).getBytes(StandardCharsets.UTF_8)));
        }
        producer.flush();
      }
      assertTrue(eventually(() -> seen.size() == records), "distinct records seen: " + seen.size());
    } finally {
      stop.set(true);
      pool.shutdown();
      pool.awaitTermination(30, TimeUnit.SECONDS);
    }
    for (Future<?> f : members) {
      f.get(1, TimeUnit.SECONDS); // a member's exception fails the test
    }
    assertEquals(records, seen.size());
    assertTrue(seen.values().stream().allMatch(n -> n.get() == 1), "every record exactly once");
    for (AtomicInteger n : perMember.values()) {
      assertEquals(records / partitions, n.get(), "records per member: " + perMember);
    }
  }
}
