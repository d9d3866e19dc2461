// scripts/services secure-up's admin step (one JVM for every call, where TopicCommand and
// AclCommand would take one each): creates PREFIX{intents,results,stock} as scripts/services up
// does for the plain broker, and grants the least-privilege ACLs of the secured broker
// (docs/reference/operations.md, "A secured broker"):
//   User:web     (the web tier, the gateway): Write intents; Read results and stock; Read the
//                consumer groups flashsale-gateway-* and flashsale-reader-* (consumers that
//                assign partitions themselves, never a worker's group)
//   User:worker  Read, Write and DescribeConfigs on the three topics; Read the groups flashsale-*
//   User:admin   a super user (server.properties): creates topics, writes sale records
// Existing topics and ACLs are left as they are (both calls are idempotent).
//
//   java -cp 'LIBS/*' SecureAdmin.java grant BOOTSTRAP CLIENT_PROPERTIES PREFIX INTENTS_PARTITIONS
//
// And the storage's format with the SCRAM users (Kafka's StorageTool, in this JVM): the users'
// passwords are read from SECRETS/NAME.password, so that no command line carries one.
//
//   java -cp 'LIBS/*' SecureAdmin.java format SERVER_PROPERTIES CLUSTER_ID SECRETS
import java.io.FileInputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class SecureAdmin {
    static final List<AclBinding> acls = new ArrayList<>();

    static void allow(String user, ResourceType type, String name, PatternType pattern, AclOperation... ops) {
        for (AclOperation op : ops)
            acls.add(new AclBinding(new ResourcePattern(type, name, pattern),
                    new AccessControlEntry("User:" + user, "*", op, AclPermissionType.ALLOW)));
    }

    static final List<String> USERS = List.of("admin", "worker", "web");

    public static void main(String[] argv) throws Exception {
        if (argv.length == 4 && argv[0].equals("format")) {
            format(argv[1], argv[2], Path.of(argv[3]));
            return;
        }
        if (argv.length != 5 || !argv[0].equals("grant")) {
            System.err.println("usage: SecureAdmin grant BOOTSTRAP CLIENT_PROPERTIES PREFIX INTENTS_PARTITIONS\n"
                    + "       SecureAdmin format SERVER_PROPERTIES CLUSTER_ID SECRETS");
            System.exit(2);
        }
        grant(List.of(argv).subList(1, 5).toArray(new String[0]));
    }

    // StorageTool exits the JVM itself (status 0 when formatted).
    static void format(String props, String clusterId, Path secrets) throws Exception {
        List<String> args = new ArrayList<>(List.of("format", "-t", clusterId, "-c", props));
        for (String u : USERS) {
            String pw = Files.readString(secrets.resolve(u + ".password")).strip();
            args.add("--add-scram");
            args.add("SCRAM-SHA-512=[name=" + u + ",password=" + pw + "]");
        }
        kafka.tools.StorageTool.main(args.toArray(new String[0]));
    }

    static void grant(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            props.load(in);
        }
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        String p = args[2];
        String intents = p + "intents", results = p + "results", stock = p + "stock";
        // The same topics and settings as scripts/services' topics_ensure: intents is the
        // replay source (kept forever, stamped with the broker's clock), stock is compacted.
        List<NewTopic> topics = List.of(
                new NewTopic(intents, Integer.parseInt(args[3]), (short) 1).configs(Map.of(
                        "message.timestamp.type", "LogAppendTime", "retention.ms", "-1",
                        "retention.bytes", "-1")),
                new NewTopic(results, 4, (short) 1),
                new NewTopic(stock, 4, (short) 1).configs(Map.of("cleanup.policy", "compact")));

        allow("web", ResourceType.TOPIC, intents, PatternType.LITERAL, AclOperation.WRITE);
        for (String t : List.of(results, stock))
            allow("web", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.READ);
        for (String g : List.of("flashsale-gateway-", "flashsale-reader-"))
            allow("web", ResourceType.GROUP, g, PatternType.PREFIXED, AclOperation.READ);
        for (String t : List.of(intents, results, stock))
            allow("worker", ResourceType.TOPIC, t, PatternType.LITERAL, AclOperation.READ,
                    AclOperation.WRITE, AclOperation.DESCRIBE_CONFIGS);
        allow("worker", ResourceType.GROUP, "flashsale-", PatternType.PREFIXED, AclOperation.READ);

        try (Admin admin = Admin.create(props)) {
            for (var e : admin.createTopics(topics).values().entrySet()) {
                try {
                    e.getValue().get();
                    System.out.println("created topic " + e.getKey());
                } catch (ExecutionException x) {
                    if (!(x.getCause() instanceof TopicExistsException))
                        throw x;
                }
            }
            admin.createAcls(acls).all().get();
            System.out.println("granted " + acls.size() + " ACLs on " + Set.of(intents, results, stock));
        }
    }
}
