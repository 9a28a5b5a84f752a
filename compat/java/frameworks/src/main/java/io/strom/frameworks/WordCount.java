package io.strom.frameworks;

import java.util.Arrays;
import java.util.Locale;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Word count as a KTable over a grouped stream: the regrouping goes through a repartition topic,
 * the counts live in a local state store backed by a compacted changelog topic.
 *
 * <p>Arguments: bootstrap application.id state.dir input-topic output-topic [key=value ...].
 * The output gets every count update: word -> count (a long).
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] args) throws InterruptedException {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[3], Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as("word-counts"))
            .toStream()
            .to(args[4], Produced.with(Serdes.String(), Serdes.Long()));
        StreamsApp.run(builder.build(), StreamsApp.properties(args, 5));
    }
}
