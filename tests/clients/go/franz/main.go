// A web tier's buy publisher written with franz-go (kgo), as tests/integration/45-web-tier-clients.sh
// runs it and docs/web-tier.md shows it. kgo's default partitioner
// hashes a record's key with murmur2 as Kafka's Java client does (the rule), and its producer
// is idempotent with acks=all by default: the options below only say so.
//
//	franz BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
//
// Publishes BUYERS_PER_SKU buys for each SKU (buyer ids BUYER_PREFIX-1, -2, ...) and prints
// one line per delivered buy: INTENT_ID SKU PARTITION OFFSET; exit 1 if one was not delivered.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"flashsale/tests/clients/go/buys"
	"flashsale/tests/clients/go/secure"
)

func main() {
	brokers, topic, buyList := buys.FromArgs("franz")
	// Each checkout attempt's record is made once, with its intent id; a retry sends it again.
	var pending []*kgo.Record
	intentOf := map[*kgo.Record]string{}
	for _, b := range buyList {
		r := &kgo.Record{Key: []byte(b.SKU), Value: []byte(b.Body)}
		intentOf[r] = b.IntentID
		pending = append(pending, r)
	}

	// snippet:begin
	client, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // the default, as is idempotence
		// No kgo.RecordPartitioner: the default hashes the key with murmur2, which is the rule.
	)
	// snippet:end
	// The secured broker's test only: the same client with SCRAM and TLS added (kgo connects
	// on first use, so the one above never did).
	if sec, serr := secure.Franz(); err == nil && (sec != nil || serr != nil) {
		client.Close()
		err = serr
		if err == nil {
			client, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
				kgo.RequiredAcks(kgo.AllISRAcks())}, sec...)...)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "franz:", err)
		os.Exit(1)
	}
	for attempt := 1; len(pending) > 0 && attempt <= 3; attempt++ {
		var again []*kgo.Record // the same records, so the same intent ids
		for _, r := range client.ProduceSync(context.Background(), pending...) {
			if r.Err != nil {
				fmt.Fprintln(os.Stderr, "franz:", r.Err)
				again = append(again, r.Record)
				continue
			}
			fmt.Printf("%s %s %d %d\n", intentOf[r.Record], r.Record.Key, r.Record.Partition, r.Record.Offset)
		}
		pending = again
	}
	client.Close()
	if len(pending) > 0 {
		fmt.Fprintf(os.Stderr, "franz: %d buys not delivered\n", len(pending))
		os.Exit(1)
	}
}
