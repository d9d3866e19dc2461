// Package secure holds the secured broker's settings of the Go web-tier producers
// (tests/integration/79-secured-broker.sh): when CLIENT_SASL_USERNAME,
// CLIENT_SASL_PASSWORD_FILE and CLIENT_SSL_CA are set, SCRAM-SHA-512 over TLS with the
// password read from its file. Kept apart from the snippets, which show a plain broker's.
package secure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// settings: the user, the password and the TLS configuration, or ok false when not asked for.
func settings() (user, password string, tlsCfg *tls.Config, ok bool, err error) {
	user, file, ca := os.Getenv("CLIENT_SASL_USERNAME"), os.Getenv("CLIENT_SASL_PASSWORD_FILE"), os.Getenv("CLIENT_SSL_CA")
	if user == "" || file == "" || ca == "" {
		return "", "", nil, false, nil
	}
	pw, err := os.ReadFile(file)
	if err != nil {
		return "", "", nil, false, err
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return "", "", nil, false, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return "", "", nil, false, fmt.Errorf("%s: no certificate", ca)
	}
	return user, strings.TrimSpace(string(pw)), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, true, nil
}

// Franz: the kgo options (none for a plain broker).
func Franz() ([]kgo.Opt, error) {
	user, pw, tlsCfg, ok, err := settings()
	if !ok || err != nil {
		return nil, err
	}
	return []kgo.Opt{kgo.DialTLSConfig(tlsCfg), kgo.SASL(scram.Auth{User: user, Pass: pw}.AsSha512Mechanism())}, nil
}

// Sarama: sets SASL/SCRAM-SHA-512 and TLS on cfg. sarama brings no SCRAM client of its own:
// franz-go's (already a dependency here) does the exchange behind sarama's interface.
func Sarama(cfg *sarama.Config) error {
	user, pw, tlsCfg, ok, err := settings()
	if !ok || err != nil {
		return err
	}
	cfg.Net.TLS.Enable = true
	cfg.Net.TLS.Config = tlsCfg
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
	cfg.Net.SASL.User = user
	cfg.Net.SASL.Password = pw
	cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{} }
	return nil
}

// scramClient: sarama's SCRAMClient over franz-go's SCRAM session.
type scramClient struct {
	session sasl.Session
	done    bool
	user    string
	pass    string
}

func (c *scramClient) Begin(user, pass, _ string) error {
	c.user, c.pass = user, pass
	return nil
}

// Step: "" first (the client's first message), then each server message.
func (c *scramClient) Step(challenge string) (string, error) {
	if c.session == nil {
		s, first, err := scram.Auth{User: c.user, Pass: c.pass}.AsSha512Mechanism().Authenticate(context.Background(), "")
		c.session = s
		return string(first), err
	}
	done, msg, err := c.session.Challenge([]byte(challenge))
	c.done = done
	return string(msg), err
}

func (c *scramClient) Done() bool { return c.done }
