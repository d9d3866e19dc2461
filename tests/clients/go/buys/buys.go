// Package buys is what the Go web-tier producers of tests/clients share: their arguments and
// the buys they publish, one record per checkout attempt, made once with its intent id.
//
//	PROGRAM BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
package buys

import (
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Buy is one checkout attempt: its intent id, SKU (the record's key) and body.
type Buy struct {
	IntentID, SKU, Body string
}

// newIntentID: a random (version 4) UUID, made once per checkout attempt.
func newIntentID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// FromArgs reads the command line of program prog (exit 2 on a bad one) and makes
// BUYERS_PER_SKU buys for each SKU, buyer ids BUYER_PREFIX-1, -2, ...
func FromArgs(prog string) (brokers []string, topic string, buys []Buy) {
	if len(os.Args) < 6 {
		fmt.Fprintf(os.Stderr, "usage: %s BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...\n", prog)
		os.Exit(2)
	}
	brokers, topic, prefix := strings.Split(os.Args[1], ","), os.Args[2], os.Args[3]
	perSku, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: BUYERS_PER_SKU: %v\n", prog, err)
		os.Exit(2)
	}
	for _, sku := range os.Args[5:] {
		for i := 1; i <= perSku; i++ {
			id := newIntentID()
			body := fmt.Sprintf(`{"v":1,"type":"buy","intent_id":"%s","sku":"%s","buyer_id":"%s-%d","qty":1}`,
				id, sku, prefix, i)
			buys = append(buys, Buy{IntentID: id, SKU: sku, Body: body})
		}
	}
	return brokers, topic, buys
}
