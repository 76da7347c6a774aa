import com.almworks.sqlite4java.SQLiteConnection;
import com.almworks.sqlite4java.SQLiteException;
import com.almworks.sqlite4java.SQLiteJob;
import com.almworks.sqlite4java.SQLiteQueue;
import com.almworks.sqlite4java.SQLiteStatement;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

/**
 * Starts DynamoDB Local listening on 127.0.0.1 only. Its command line has no host option and its
 * server builds a Jetty connector for every interface, so this builds the server as its own main
 * does (same arguments), sets each connector's host to loopback, then starts it. Reflection for
 * DynamoDB Local's own classes; the one class it extends is sqlite4java's job, on the class path
 * through the jar's manifest. Run it with `java -cp DynamoDBLocal.jar LoopbackDynamoDbLocal.java
 * <DynamoDB Local arguments>` (the source-file launcher compiles it). Used by local/cloud/dynamodb-local.ts,
 * which reads the lines this prints.
 */
public class LoopbackDynamoDbLocal {
  /**
   * DynamoDB Local keeps every stream record of the database in one SQLite table (`us`), keyed by
   * sequence number alone, and looks a stream's records up by scanning it: each write to a streamed
   * table then costs time in proportion to the records written before that stream began, kept for
   * 24 hours, of every table (deleted ones included). After 10,000 records elsewhere a new table's
   * writes were about 18x slower. These indexes make those lookups logarithmic; they change no
   * answer, only how SQLite finds the rows. `-Dlocal.streamRecordIndexes=off` leaves them out (the
   * benchmark's baseline, `npm run bench -- local-cloud`).
   */
  static final String[] STREAM_RECORD_INDEXES = {
    "CREATE INDEX IF NOT EXISTS us_by_stream ON us (StreamID, SequenceNumber)",
    "CREATE INDEX IF NOT EXISTS us_by_shard ON us (ShardID, SequenceNumber)",
  };

  public static void main(String[] args) throws Exception {
    Class<?> runner = Class.forName("software.amazon.dynamodb.services.local.main.ServerRunner");
    Object server = runner.getMethod("createServerFromCommandLineArgs", String[].class).invoke(null, (Object) args);
    if (!"off".equals(System.getProperty("local.streamRecordIndexes"))) {
      try {
        System.out.println("stream-record-indexes: " + String.join(",", indexStreamRecords(server)));
      } catch (Exception | LinkageError error) {
        // Only slower without them: every answer stays the same.
        System.out.println("warning: stream records left unindexed (" + error + ")");
      }
    }
    Object jetty = field(server, "server");
    Object[] connectors = (Object[]) jetty.getClass().getMethod("getConnectors").invoke(jetty);
    if (connectors.length == 0) throw new IllegalStateException("DynamoDB Local built no connector");
    for (Object connector : connectors) {
      connector.getClass().getMethod("setHost", String.class).invoke(connector, "127.0.0.1");
    }
    server.getClass().getMethod("start").invoke(server);
    System.out.println("loopback-only: 127.0.0.1");
  }

  /**
   * Adds the indexes on the shared database's own SQLite queue (its connection is confined to that
   * queue's thread), before the server answers anything; returns the names of the indexes `us` has.
   */
  static List<String> indexStreamRecords(Object server) throws Exception {
    Object requestHandler = field(field(server, "serverHandler"), "primaryHandler");
    // With -sharedDb every caller gets the one database this creates (or returns) for any key.
    Method getHandler = requestHandler.getClass().getDeclaredMethod("getHandler", String.class);
    getHandler.setAccessible(true);
    Object client = getHandler.invoke(requestHandler, "shared");
    SQLiteQueue queue = (SQLiteQueue) field(field(client, "dbAccess"), "queue");
    return queue.execute(new SQLiteJob<List<String>>() {
      @Override
      protected List<String> job(SQLiteConnection connection) throws SQLiteException {
        for (String index : STREAM_RECORD_INDEXES) connection.exec(index);
        List<String> names = new ArrayList<>();
        SQLiteStatement listed = connection.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'us' AND sql IS NOT NULL ORDER BY name");
        try {
          while (listed.step()) names.add(listed.columnString(0));
        } finally {
          listed.dispose();
        }
        return names;
      }
    }).complete();
  }

  /** A field declared by the object's class or one of its superclasses. */
  static Object field(Object owner, String name) throws ReflectiveOperationException {
    for (Class<?> type = owner.getClass(); type != null; type = type.getSuperclass()) {
      try {
        Field field = type.getDeclaredField(name);
        field.setAccessible(true);
        return field.get(owner);
      } catch (NoSuchFieldException ignored) {
        // Declared higher up.
      }
    }
    throw new NoSuchFieldException(owner.getClass().getName() + "." + name);
  }
}
