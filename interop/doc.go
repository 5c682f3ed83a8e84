// Package interop holds Warren's client-interoperability tests: real AMQP
// 0-9-1 clients (pika, amqplib, Celery/kombu, and the amqp091-go integration
// suite) are run as subprocesses against a broker.
//
// By default each test starts an in-process Warren broker with
// warrentest.Start. Set WARREN_INTEROP_URL to point the tests at another
// broker instead, e.g. a local RabbitMQ to check the suites themselves:
//
//	WARREN_INTEROP_URL=amqp://guest:guest@127.0.0.1:5672/ go test -v ./interop
//
// A test whose client is not installed skips, naming the package to install;
// with CI=true a missing client fails the test instead. The Python suites
// run with /usr/bin/python3, or the interpreter WARREN_INTEROP_PYTHON names.
//
// TestAmqp091Suite takes several minutes and is skipped with -short.
package interop
