import java.lang.reflect.Field;

/**
 * Starts DynamoDB Local listening on 127.0.0.1 only. Its command line has no host option and its
 * server builds a Jetty connector for every interface, so this builds the server as its own main
 * does (same arguments), sets each connector's host to loopback, then starts it. Reflection only:
 * run it with `java -cp DynamoDBLocal.jar LoopbackDynamoDbLocal.java <DynamoDB Local arguments>`
 * (the source-file launcher compiles it against nothing but the JDK). Used by local/dynamodb-local.ts.
 */
public class LoopbackDynamoDbLocal {
  public static void main(String[] args) throws Exception {
    Class<?> runner = Class.forName("software.amazon.dynamodb.services.local.main.ServerRunner");
    Object server = runner.getMethod("createServerFromCommandLineArgs", String[].class).invoke(null, (Object) args);
    Field jettyField = server.getClass().getDeclaredField("server");
    jettyField.setAccessible(true);
    Object jetty = jettyField.get(server);
    Object[] connectors = (Object[]) jetty.getClass().getMethod("getConnectors").invoke(jetty);
    if (connectors.length == 0) throw new IllegalStateException("DynamoDB Local built no connector");
    for (Object connector : connectors) {
      connector.getClass().getMethod("setHost", String.class).invoke(connector, "127.0.0.1");
    }
    server.getClass().getMethod("start").invoke(server);
    System.out.println("loopback-only: 127.0.0.1");
  }
}
