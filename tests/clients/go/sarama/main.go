// A web tier's buy publisher written with IBM/sarama, as tests/integration/45-web-tier-clients.sh
// runs it and docs/web-tier.md shows it. sarama's default
// partitioner hashes the key with FNV-1a, and so does NewReferenceHashPartitioner (it only
// takes the absolute value as Java does): neither is the rule. NewMurmur2Partitioner (sarama
// 1.50.0 and later) is Kafka's Java default, murmur2(key) % partitions.
//
//	sarama BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
//
// Publishes BUYERS_PER_SKU buys for each SKU (buyer ids BUYER_PREFIX-1, -2, ...) and prints
// one line per delivered buy: INTENT_ID SKU PARTITION OFFSET; exit 1 if one was not delivered.
// With CLIENT_DEFAULT_PARTITIONER=1 in the environment it keeps sarama's default partitioner
// (the test's misrouting client).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/IBM/sarama"

	"flashsale/tests/clients/go/buys"
	"flashsale/tests/clients/go/secure"
)

func main() {
	brokers, topic, buyList := buys.FromArgs("sarama")
	// Each checkout attempt's record is made once, with its intent id; a retry sends it again.
	var pending []*sarama.ProducerMessage
	for _, b := range buyList {
		pending = append(pending, &sarama.ProducerMessage{Topic: topic, Metadata: b.IntentID,
			Key: sarama.StringEncoder(b.SKU), Value: sarama.StringEncoder(b.Body)})
	}

	// snippet:begin
	cfg := sarama.NewConfig()
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner // the rule (the default is FNV-1a)
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1 // the idempotent producer needs it
	cfg.Producer.Return.Successes = true
	// snippet:end
	if os.Getenv("CLIENT_DEFAULT_PARTITIONER") != "" {
		cfg.Producer.Partitioner = sarama.NewConfig().Producer.Partitioner
	}
	if err := secure.Sarama(cfg); err != nil { // the secured broker's test only
		fmt.Fprintln(os.Stderr, "sarama:", err)
		os.Exit(1)
	}
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sarama:", err)
		os.Exit(1)
	}
	for attempt := 1; len(pending) > 0 && attempt <= 3; attempt++ {
		failed := map[*sarama.ProducerMessage]bool{}
		var perrs sarama.ProducerErrors
		if err := producer.SendMessages(pending); errors.As(err, &perrs) {
			for _, e := range perrs {
				failed[e.Msg] = true
			}
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "sarama:", err)
			for _, m := range pending {
				failed[m] = true
			}
		}
		var again []*sarama.ProducerMessage // the same records, so the same intent ids
		for _, m := range pending {
			if failed[m] {
				again = append(again, m)
			} else {
				fmt.Printf("%s %s %d %d\n", m.Metadata, m.Key, m.Partition, m.Offset)
			}
		}
		pending = again
	}
	if err := producer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "sarama: close:", err)
	}
	if len(pending) > 0 {
		fmt.Fprintf(os.Stderr, "sarama: %d buys not delivered\n", len(pending))
		os.Exit(1)
	}
}
