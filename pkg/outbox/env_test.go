package outbox

import (
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// TestWriterConfigFromEnv reads the variables GrantWriteEvents sets,
// applies the defaults, and names each missing or unparsable variable.
func TestWriterConfigFromEnv(t *testing.T) {
	set := func(kv map[string]string) {
		for _, k := range []string{config.EnvOutboxTable, config.EnvEventSource, config.EnvPendingShards, config.EnvMaxEntryBytes} {
			t.Setenv(k, kv[k])
		}
	}
	set(map[string]string{config.EnvOutboxTable: "outbox", config.EnvEventSource: "com.example.wallet", config.EnvPendingShards: "4"})
	c, err := WriterConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.Table != "outbox" || c.Source != "com.example.wallet" || c.PendingShards != 4 || c.MaxEntryBytes != config.DefaultMaxEntryBytes {
		t.Fatalf("config %+v", c)
	}
	c.setDefaults() // as NewWriter does
	if err := c.Validate(); err != nil {
		t.Fatalf("the config read from the construct's variables is invalid: %v", err)
	}
	set(map[string]string{config.EnvPendingShards: "many"})
	_, err = WriterConfigFromEnv()
	for _, name := range []string{config.EnvOutboxTable, config.EnvEventSource, config.EnvPendingShards} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	if err != nil && strings.Contains(err.Error(), config.EnvMaxEntryBytes) {
		t.Errorf("error %v names %s, which is unset (its default applies)", err, config.EnvMaxEntryBytes)
	}
}
