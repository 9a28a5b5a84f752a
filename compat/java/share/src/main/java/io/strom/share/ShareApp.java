package io.strom.share;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Share consumers (KIP-932) driven by the values of the records they get, for the share-group
 * tests (tests/integration/share). One JVM runs {@code --consumers N} KafkaShareConsumers, each
 * its own member, on its own thread; consumer i joins the i-th {@code --group} (round robin), so
 * one JVM can also serve several groups.
 *
 * <pre>
 * java io.strom.share.ShareApp --bootstrap HOST:PORT --group G [--group G2] --topic T [--topic T2]
 *      [--mode explicit|implicit] [--consumers N] [--count N] [--name NAME] [--poll-ms MS]
 *      [--prop key=value]...
 * </pre>
 *
 * What each record gets (explicit mode; implicit mode accepts everything by its next poll):
 * <ul>
 *   <li>{@code reject:...} REJECT</li>
 *   <li>{@code release:N:...} RELEASE while its delivery count is at most N, then ACCEPT;
 *       {@code release:always:...} RELEASE every time</li>
 *   <li>{@code renew:MS:...} held for MS ms: RENEW after {@code --renew-every} ms (default
 *       1000) each time the record comes back (the next poll after a renewal returns it again),
 *       then ACCEPT</li>
 *   <li>{@code crash:NAME...} the JVM halts (Runtime.halt, no acknowledgement sent, no close)
 *       when this app is {@code --name NAME}; any other app ACCEPTs it</li>
 *   <li>{@code hang:NAME...} when this app is {@code --name NAME}: the consumer's thread stops
 *       there, holding its batch unacknowledged, with the client's background thread still
 *       heartbeating and its connections open, until the app is told to stop (then it halts);
 *       any other app ACCEPTs it</li>
 *   <li>{@code slow:MS:...} ACCEPT after MS ms of "work"</li>
 *   <li>anything else ACCEPT</li>
 * </ul>
 * After each batch: {@code commitSync()}. Output, one line each, flushed:
 * {@code STARTED <name> <consumers>}, {@code RECORD <consumer> <partition> <offset>
 * <deliveryCount> <ack-type> <value>} (ack-type IMPLICIT in implicit mode),
 * {@code RENEWED <consumer> <partition> <offset> <deliveryCount>}, {@code COMMIT <consumer> <topic>-<partition>
 * <ok|exception class: message>} for each partition commitSync reports,
 * {@code ACKED <consumer> <topic>-<partition> <offsets> <ok|exception>} from the
 * acknowledgement commit callback, {@code ERROR <consumer> <exception>}, {@code CRASH ...}, {@code HANG ...},
 * {@code CLOSED <consumer>}, {@code DONE <records handled>}. The app stops (closing its
 * consumers, which leave the group) when stdin closes, when SIGTERM arrives or once
 * {@code --count} records were handled (the batch in hand is finished first).
 */
public final class ShareApp {
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    private final String bootstrap;
    private final List<String> groups;
    private final List<String> topics;
    private final String mode;
    private final int consumers;
    private final int count;
    private final String name;
    private final long pollMs;
    private final long renewEveryMs;
    private final Properties extra;
    private final AtomicBoolean stop = new AtomicBoolean();
    private final AtomicInteger handled = new AtomicInteger();
    private final List<KafkaShareConsumer<String, String>> live = new ArrayList<>();
    private final CountDownLatch closed;
    private final Map<String, Long> renewStarted = new java.util.concurrent.ConcurrentHashMap<>();

    private ShareApp(Map<String, List<String>> opts) {
        bootstrap = one(opts, "bootstrap", null);
        groups = opts.getOrDefault("group", List.of());
        topics = opts.getOrDefault("topic", List.of());
        mode = one(opts, "mode", "explicit");
        consumers = Integer.parseInt(one(opts, "consumers", "1"));
        count = Integer.parseInt(one(opts, "count", "0"));
        name = one(opts, "name", "app");
        pollMs = Long.parseLong(one(opts, "poll-ms", "500"));
        renewEveryMs = Long.parseLong(one(opts, "renew-every", "1000"));
        extra = new Properties();
        for (String kv : opts.getOrDefault("prop", List.of())) {
            int eq = kv.indexOf('=');
            extra.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
        }
        if (bootstrap == null || groups.isEmpty() || topics.isEmpty()) {
            throw new IllegalArgumentException("--bootstrap, --group and --topic are required");
        }
        if (!mode.equals("explicit") && !mode.equals("implicit")) {
            throw new IllegalArgumentException("--mode is explicit or implicit");
        }
        closed = new CountDownLatch(consumers);
    }

    private static String one(Map<String, List<String>> opts, String key, String dflt) {
        List<String> values = opts.get(key);
        return values == null || values.isEmpty() ? dflt : values.get(values.size() - 1);
    }

    static synchronized void say(String line) {
        OUT.println(line);
        OUT.flush();
    }

    private KafkaShareConsumer<String, String> newConsumer(int index) {
        Properties props = new Properties();
        props.setProperty("bootstrap.servers", bootstrap);
        props.setProperty("group.id", groups.get(index % groups.size()));
        props.setProperty("client.id", name + "-" + index);
        props.setProperty("share.acknowledgement.mode", mode);
        props.putAll(extra);
        return new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private void run() throws InterruptedException {
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            KafkaShareConsumer<String, String> consumer = newConsumer(i);
            synchronized (live) {
                live.add(consumer);
            }
            final int index = i;
            Thread t = new Thread(() -> loop(index, consumer), name + "-consumer-" + i);
            threads.add(t);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            requestStop();
            try {
                closed.await(20, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
        }));
        Thread stdin = new Thread(() -> {
            InputStream in = System.in;
            byte[] buf = new byte[256];
            try {
                while (in.read(buf) >= 0) {
                    // input is ignored: only its end matters
                }
            } catch (IOException ignored) {
                // treated like the end of input
            }
            requestStop();
        }, "stdin-watch");
        stdin.setDaemon(true);
        stdin.start();
        say("STARTED " + name + " " + consumers);
        threads.forEach(Thread::start);
        for (Thread t : threads) {
            t.join();
        }
        say("DONE " + handled.get());
    }

    private void requestStop() {
        stop.set(true);
        synchronized (live) {
            live.forEach(KafkaShareConsumer::wakeup);
        }
    }

    private void loop(int index, KafkaShareConsumer<String, String> consumer) {
        try {
            consumer.setAcknowledgementCommitCallback((offsets, exception) -> acked(index, offsets, exception));
            consumer.subscribe(topics);
            while (!stop.get()) {
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(pollMs));
                } catch (WakeupException e) {
                    break;
                }
                if (records.isEmpty()) {
                    continue;
                }
                for (ConsumerRecord<String, String> record : records) {
                    handle(index, consumer, record);
                }
                commit(index, consumer);
                if (count > 0 && handled.get() >= count) {
                    requestStop();
                }
            }
        } catch (WakeupException e) {
            // stopping
        } catch (RuntimeException e) {
            say("ERROR " + index + " " + e.getClass().getName() + ": " + e.getMessage());
        } finally {
            try {
                consumer.close(Duration.ofSeconds(15));
            } catch (RuntimeException e) {
                say("ERROR " + index + " close " + e.getClass().getName() + ": " + e.getMessage());
            }
            say("CLOSED " + index);
            closed.countDown();
        }
    }

    private void handle(int index, KafkaShareConsumer<String, String> consumer, ConsumerRecord<String, String> record) {
        String value = record.value() == null ? "" : record.value();
        short delivery = record.deliveryCount().orElse((short) -1);
        String ack;
        if (mode.equals("implicit")) {
            if (value.startsWith("crash:" + name)) {
                crash(index, record);
            }
            ack = "IMPLICIT";
        } else if (value.startsWith("crash:" + name)) {
            crash(index, record);
            return;
        } else if (value.startsWith("hang:" + name)) {
            hang(index, record);
            return;
        } else if (value.startsWith("reject:")) {
            consumer.acknowledge(record, AcknowledgeType.REJECT);
            ack = "REJECT";
        } else if (value.startsWith("release:")) {
            String limit = value.split(":", 3)[1];
            if (limit.equals("always") || delivery <= Integer.parseInt(limit)) {
                consumer.acknowledge(record, AcknowledgeType.RELEASE);
                ack = "RELEASE";
            } else {
                consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                ack = "ACCEPT";
            }
        } else if (value.startsWith("renew:")) {
            // RENEW keeps the record acquired with a fresh lock; once the renewal has been sent
            // (commitSync after the batch), the next poll returns the record again.
            long holdMs = Long.parseLong(value.split(":", 3)[1]);
            String key = record.topic() + "-" + record.partition() + "@" + record.offset();
            long first = renewStarted.computeIfAbsent(key, k -> System.nanoTime());
            if (System.nanoTime() - first < TimeUnit.MILLISECONDS.toNanos(holdMs)) {
                sleep(renewEveryMs);
                consumer.acknowledge(record, AcknowledgeType.RENEW);
                say("RENEWED " + index + " " + record.partition() + " " + record.offset() + " " + delivery);
                return;
            }
            renewStarted.remove(key);
            consumer.acknowledge(record, AcknowledgeType.ACCEPT);
            ack = "ACCEPT";
        } else if (value.startsWith("slow:")) {
            sleep(Long.parseLong(value.split(":", 3)[1]));
            consumer.acknowledge(record, AcknowledgeType.ACCEPT);
            ack = "ACCEPT";
        } else {
            consumer.acknowledge(record, AcknowledgeType.ACCEPT);
            ack = "ACCEPT";
        }
        say("RECORD " + index + " " + record.partition() + " " + record.offset() + " " + delivery
            + " " + ack + " " + value);
        handled.incrementAndGet();
    }

    private void crash(int index, ConsumerRecord<String, String> record) {
        say("CRASH " + index + " " + record.partition() + " " + record.offset());
        OUT.flush();
        Runtime.getRuntime().halt(3);
    }

    private void hang(int index, ConsumerRecord<String, String> record) {
        say("HANG " + index + " " + record.partition() + " " + record.offset());
        while (!stop.get()) {
            sleep(100);
        }
        Runtime.getRuntime().halt(4);
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(Math.max(ms, 1));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void commit(int index, KafkaShareConsumer<String, String> consumer) {
        Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync(Duration.ofSeconds(30));
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
            say("COMMIT " + index + " " + e.getKey().topic() + "-" + e.getKey().partition() + " "
                + e.getValue().map(x -> x.getClass().getName() + ": " + x.getMessage()).orElse("ok"));
        }
    }

    private static void acked(int index, Map<TopicIdPartition, Set<Long>> offsets, Exception exception) {
        String outcome = exception == null ? "ok" : exception.getClass().getName() + ": " + exception.getMessage();
        for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
            say("ACKED " + index + " " + e.getKey().topic() + "-" + e.getKey().partition() + " "
                + e.getValue().stream().sorted().map(String::valueOf).reduce((a, b) -> a + "," + b).orElse("")
                + " " + outcome);
        }
    }

    public static void main(String[] args) throws InterruptedException {
        Map<String, List<String>> opts = new java.util.HashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("bad argument " + args[i]);
            }
            opts.computeIfAbsent(args[i].substring(2), k -> new ArrayList<>()).add(args[++i]);
        }
        new ShareApp(opts).run();
    }
}
