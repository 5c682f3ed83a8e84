package main

import (
	"fmt"
	"os"

	"github.com/warrenmq/warren/broker"
)

// loadDefinitions imports a RabbitMQ definitions file (--definitions), if
// one is given, into the broker before it serves.
func loadDefinitions(b *broker.Broker, file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("--definitions: %w", err)
	}
	defer f.Close()
	if err := b.ImportDefinitions(f); err != nil {
		return fmt.Errorf("--definitions %s: %w", file, err)
	}
	b.Logger().Info("definitions imported", "file", file)
	return nil
}
