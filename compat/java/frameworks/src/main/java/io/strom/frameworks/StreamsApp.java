package io.strom.frameworks;

import java.time.Duration;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.Topology;

/**
 * What the test applications share: their configuration (exactly-once v2, no record cache so
 * every update reaches the output, a short session timeout so a killed instance's tasks move
 * soon) and a run loop that prints its state and active tasks for the test to follow.
 *
 * <p>Arguments of every application: bootstrap, application.id, state.dir, its topics, then any
 * number of key=value properties that override the defaults.
 */
final class StreamsApp {
    private StreamsApp() {}

    static Properties properties(String[] args, int firstExtra) {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put("session.timeout.ms", "6000");
        props.put("heartbeat.interval.ms", "1000");
        for (int i = firstExtra; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return props;
    }

    /** Runs until SIGTERM; prints "STATE old -> new" and "ACTIVE-TASKS [..]" on each change. */
    static void run(Topology topology, Properties props) throws InterruptedException {
        System.out.println("TOPOLOGY " + topology.describe());
        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + before + " -> " + now);
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("ACTIVE-TASKS " + activeTasks(streams));
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + e);
            e.printStackTrace(System.out);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }

    private static Set<String> activeTasks(KafkaStreams streams) {
        Set<String> tasks = new TreeSet<>();
        for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
            for (TaskMetadata task : thread.activeTasks()) {
                tasks.add(task.taskId().toString());
            }
        }
        return tasks;
    }
}
