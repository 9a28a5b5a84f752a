package org.apache.kafka.common.utils;

/** The 4.3 name of what kafka-clients 4.4 calls utils.internals.Exit (see README.md). */
public final class Exit {
    private Exit() {
    }

    public static void exit(int statusCode) {
        org.apache.kafka.common.utils.internals.Exit.exit(statusCode);
    }

    public static void exit(int statusCode, String message) {
        org.apache.kafka.common.utils.internals.Exit.exit(statusCode, message);
    }

    public static void addShutdownHook(String name, Runnable runnable) {
        org.apache.kafka.common.utils.internals.Exit.addShutdownHook(name, runnable);
    }
}
