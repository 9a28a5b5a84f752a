package io.strom.compat;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Timeout;

/**
 * Shared plumbing: the broker under test comes from -Dbootstrap (or $BOOTSTRAP), each test gets an
 * Admin and unique topic names, and every topic a test created is deleted after it.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
abstract class CompatTest {
  static final Duration DEADLINE = Duration.ofSeconds(30);

  protected Admin admin;
  private final List<String> created = new ArrayList<>();

  static String bootstrap() {
    String b = System.getProperty("bootstrap");
    if (b == null || b.isBlank() || b.startsWith("${")) {
      b = System.getenv("BOOTSTRAP");
    }
    assertNotNull(b, "set -Dbootstrap=host:port (or $BOOTSTRAP) to the broker under test");
    return b;
  }

  @BeforeEach
  void openAdmin() {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
    admin = Admin.create(p);
  }

  @AfterEach
  void deleteTopicsAndCloseAdmin() {
    try {
      if (!created.isEmpty()) {
        admin.deleteTopics(created).all().get(30, TimeUnit.SECONDS);
      }
    } catch (Exception e) {
      // A test may have deleted its topic already; cleanup must not hide the test's own result.
    } finally {
      admin.close(Duration.ofSeconds(10));
    }
  }

  /** A topic name no other test (or earlier run) uses. */
  static String uniqueTopic(String prefix) {
    return "compat-" + prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  /** Creates a topic (replication factor 1) and remembers it for cleanup. */
  String createTopic(String prefix, int partitions, Map<String, String> configs) throws Exception {
    String name = uniqueTopic(prefix);
    admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs)))
        .all().get(30, TimeUnit.SECONDS);
    created.add(name);
    awaitLeaders(name, partitions);
    return name;
  }

  /**
   * Waits until the broker's metadata shows every partition of a new topic with a leader: Kafka's
   * createTopics returns once its controller committed the topic, and a broker applies that a
   * moment later (describeConfigs of the topic just before says UnknownTopicOrPartition).
   */
  void awaitLeaders(String topic, int partitions) throws InterruptedException {
    assertTrue(eventually(() -> {
      try {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
            .get(30, TimeUnit.SECONDS).get(topic);
        return d.partitions().size() == partitions
            && d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty());
      } catch (Exception e) {
        return false;
      }
    }), topic + ": every partition has a leader");
  }

  String createTopic(String prefix, int partitions) throws Exception {
    return createTopic(prefix, partitions, Map.of());
  }

  /** Creates a topic with explicit replica assignments (partition -> broker ids), for cleanup too. */
  String createTopic(String prefix, Map<Integer, List<Integer>> assignments) throws Exception {
    String name = uniqueTopic(prefix);
    admin.createTopics(List.of(new NewTopic(name, assignments))).all().get(30, TimeUnit.SECONDS);
    created.add(name);
    awaitLeaders(name, assignments.size());
    return name;
  }

  static Properties producerProps() {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
    p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
    return p;
  }

  static Properties consumerProps(String groupId) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    if (groupId != null) {
      p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
    }
    return p;
  }

  /** Reads every partition of the topic from the start (no group) until n records or the deadline. */
  static List<ConsumerRecord<byte[], byte[]>> readAll(String topic, int partitions, int n) {
    List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(null))) {
      List<TopicPartition> tps = new ArrayList<>();
      for (int i = 0; i < partitions; i++) {
        tps.add(new TopicPartition(topic, i));
      }
      c.assign(tps);
      c.seekToBeginning(tps);
      long end = System.nanoTime() + DEADLINE.toNanos();
      while (out.size() < n && System.nanoTime() < end) {
        c.poll(Duration.ofMillis(200)).forEach(out::add);
      }
    }
    return out;
  }

  /** Polls a condition until it holds or the deadline passes; true if it held. */
  static boolean eventually(BooleanSupplier condition) throws InterruptedException {
    long end = System.nanoTime() + DEADLINE.toNanos();
    while (System.nanoTime() < end) {
      if (condition.getAsBoolean()) {
        return true;
      }
      Thread.sleep(100); // poll interval, not synchronisation
    }
    return condition.getAsBoolean();
  }

  /** The cause of a failed future's ExecutionException (what a Kafka user catches). */
  static Throwable causeOf(ThrowingRunnable r) {
    try {
      r.run();
    } catch (ExecutionException e) {
      return e.getCause();
    } catch (Throwable t) {
      return t;
    }
    return null;
  }


  @FunctionalInterface
  interface ThrowingRunnable {
    void run() throws Exception;
  }
}
