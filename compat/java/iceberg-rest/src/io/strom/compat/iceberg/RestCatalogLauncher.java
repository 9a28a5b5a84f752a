package io.strom.compat.iceberg;

import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.util.thread.QueuedThreadPool;

/**
 * An Iceberg REST catalog on 127.0.0.1 only, for Strom's tests (issue 33).
 *
 * <p>The backend is a JdbcCatalog on a SQLite file with the V1 schema, the one pyiceberg's
 * SqlCatalog and Spark's JdbcCatalog share, so the same catalog can be reached through REST and
 * directly. Iceberg's own handler of the REST protocol (RESTCatalogAdapter) and its servlet
 * (RESTCatalogServlet, both from iceberg-core's tests jar) serve it through Jetty. Iceberg's
 * RESTCatalogServer does the same but listens on every address; this one binds the loopback
 * address alone.
 *
 * <p>Usage: {@code RestCatalogLauncher <sqlite file> <warehouse uri> <catalog name> <port>}; port
 * 0 takes any free one. Once it serves, one line {@code port=<n>} goes to stdout; logs go to
 * stderr. It stops on SIGTERM.
 */
public final class RestCatalogLauncher {
  private static final String HOST = "127.0.0.1";

  private RestCatalogLauncher() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println(
          "usage: RestCatalogLauncher <sqlite file> <warehouse uri> <catalog name> <port>");
      System.exit(2);
    }
    JdbcCatalog catalog = backend(args[0], args[1], args[2]);
    Server server = new Server(new QueuedThreadPool(16, 2));
    ServerConnector connector = new ServerConnector(server, 1, 1);
    connector.setHost(HOST);
    connector.setPort(Integer.parseInt(args[3]));
    server.addConnector(connector);
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(catalog))),
        "/*");
    server.setHandler(context);
    server.setStopAtShutdown(true); // SIGTERM: Jetty stops, then the catalog closes
    Runtime.getRuntime().addShutdownHook(new Thread(catalog::close));
    server.start();
    System.out.println("port=" + connector.getLocalPort());
    System.out.flush();
    server.join();
  }

  private static JdbcCatalog backend(String sqliteFile, String warehouse, String name) {
    Map<String, String> props = new HashMap<>();
    props.put(CatalogProperties.URI, "jdbc:sqlite:" + sqliteFile);
    props.put(CatalogProperties.WAREHOUSE_LOCATION, warehouse);
    props.put("jdbc.schema-version", "V1");
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(new Configuration()); // the default FileIO, HadoopFileIO, reads it
    catalog.initialize(name, props);
    return catalog;
  }
}
