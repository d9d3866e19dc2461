// A web tier's buy publisher written with Kafka's own Java producer (kafka-clients), as
// tests/integration/45-web-tier-clients.sh runs it and docs/web-tier.md shows it.
// Its default partitioner is the intents topic's rule, murmur2(key) %
// partitions, so nothing about partitioning is set.
//
//   java -cp '.local/cache/kafka-3.9.1/libs/*' tests/clients/WebTierProducer.java \
//       BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
//
// Publishes BUYERS_PER_SKU buys for each SKU (buyer ids BUYER_PREFIX-1, -2, ...) and prints one
// line per delivered buy: INTENT_ID SKU PARTITION OFFSET. Exit 1 if a buy was not delivered.
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class WebTierProducer {
    // One checkout attempt: its intent id is made once, here, and every retry sends it again.
    record Buy(String sku, String buyerId, String intentId) {
        String json() {
            // SKUs and buyer ids here need no JSON escaping; a real web tier uses its JSON library.
            return String.format("{\"v\":1,\"type\":\"buy\",\"intent_id\":\"%s\",\"sku\":\"%s\","
                    + "\"buyer_id\":\"%s\",\"qty\":1}", intentId, sku, buyerId);
        }
    }

    // The secured broker's settings (tests/integration/79-secured-broker.sh) when
    // CLIENT_SASL_USERNAME, CLIENT_SASL_PASSWORD_FILE and CLIENT_SSL_CA are set: SCRAM-SHA-512
    // over TLS, the password read from its file.
    static void security(Properties props) throws java.io.IOException {
        String user = System.getenv("CLIENT_SASL_USERNAME"), file = System.getenv("CLIENT_SASL_PASSWORD_FILE"),
                ca = System.getenv("CLIENT_SSL_CA");
        if (user == null || file == null || ca == null)
            return;
        String pw = java.nio.file.Files.readString(java.nio.file.Path.of(file)).strip();
        props.put("security.protocol", "SASL_SSL");
        props.put("sasl.mechanism", "SCRAM-SHA-512");
        props.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + pw + "\";");
        props.put("ssl.truststore.type", "PEM");
        props.put("ssl.truststore.location", ca);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: WebTierProducer BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...");
            System.exit(2);
        }
        String brokers = args[0], topic = args[1], prefix = args[2];
        int perSku = Integer.parseInt(args[3]);
        List<Buy> pending = new ArrayList<>();
        for (String sku : Arrays.asList(args).subList(4, args.length))
            for (int i = 1; i <= perSku; i++)
                pending.add(new Buy(sku, prefix + "-" + i, UUID.randomUUID().toString()));

        // snippet:begin
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        // No partitioner.class: the default hashes the key with murmur2, which is the rule.
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        // snippet:end
        security(props); // the secured broker's test only
        // snippet:begin
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int attempt = 1; !pending.isEmpty() && attempt <= 3; attempt++) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (Buy b : pending) // key = the SKU; the same intent id on every attempt
                    sent.add(producer.send(new ProducerRecord<>(topic, b.sku(), b.json())));
                List<Buy> failed = new ArrayList<>();
                for (int i = 0; i < sent.size(); i++) {
                    try {
                        RecordMetadata m = sent.get(i).get();
                        Buy b = pending.get(i);
                        System.out.printf("%s %s %d %d%n", b.intentId(), b.sku(), m.partition(), m.offset());
                    } catch (ExecutionException e) {
                        failed.add(pending.get(i)); // retried below with the same intent id
                    }
                }
                pending = failed;
            }
        }
        // snippet:end
        if (!pending.isEmpty()) {
            System.err.println("WebTierProducer: " + pending.size() + " buys not delivered");
            System.exit(1);
        }
    }
}
