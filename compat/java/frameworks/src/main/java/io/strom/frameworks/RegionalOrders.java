package io.strom.frameworks;

import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * A stream-table join and a windowed aggregation: orders (key customer id) are joined with the
 * customers table (customer id -> region), regrouped by region and counted in one-minute
 * tumbling windows of event time.
 *
 * <p>Arguments: bootstrap application.id state.dir orders customers output [key=value ...].
 * The output gets every count update: "region@windowStartMillis" -> count (a long).
 */
public final class RegionalOrders {
    private RegionalOrders() {}

    public static void main(String[] args) throws InterruptedException {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> customers = builder.table(
            args[4], Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("customers"));
        builder.stream(args[3], Consumed.with(Serdes.String(), Serdes.String()))
            .join(customers, (amount, region) -> region)
            .groupBy((customer, region) -> region,
                     Grouped.with("by-region", Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofHours(2)))
            .count(Materialized.as("orders-per-region"))
            .toStream((window, count) -> window.key() + "@" + window.window().start())
            .to(args[5], Produced.with(Serdes.String(), Serdes.Long()));
        StreamsApp.run(builder.build(), StreamsApp.properties(args, 6));
    }
}
