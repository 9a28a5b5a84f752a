package org.apache.kafka.common.utils;

/** The 4.3 name of what kafka-clients 4.4 calls utils.internals.AppInfoParser (see README.md). */
public final class AppInfoParser {
    private AppInfoParser() {
    }

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }

    public static String getCommitId() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getCommitId();
    }
}
