// Command hello is the README's first example: it declares a queue,
// publishes one message and reads it back.
//
//	go run ./examples/hello --url amqp://guest:guest@localhost:5672/
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	url := flag.String("url", "amqp://guest:guest@localhost:5672/", "broker URL")
	flag.Parse()
	if err := run(*url, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(url string, out io.Writer) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	q, err := ch.QueueDeclare("hello", false, false, false, false, nil)
	if err != nil {
		return err
	}
	err = ch.PublishWithContext(context.Background(), "", q.Name, false, false,
		amqp.Publishing{ContentType: "text/plain", Body: []byte("hello, warren")})
	if err != nil {
		return err
	}
	msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		return err
	}
	select {
	case d := <-msgs:
		fmt.Fprintln(out, string(d.Body))
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("no message within 10s")
	}
}
