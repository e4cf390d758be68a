"""The first program: send an order to a queue and receive it (blocking API).

Start a reference broker first (docs/guide/getting-started.md):

    .venv/bin/haclient-broker --port 5672 --user app:secret
"""

import haclient
from haclient import Queue, TextMessage

URL = "failover:(amqp://app:secret@127.0.0.1:5672)"

with haclient.connect(URL) as connection:
    connection.start()  # deliveries flow once the connection is started
    with connection.create_session() as session:  # AUTO acknowledge
        producer = session.create_producer(Queue("orders"))
        producer.send(TextMessage("order 1"))  # returns once the broker accepted it
        print("sent: order 1")

        consumer = session.create_consumer(Queue("orders"))
        message = consumer.receive(timeout=5)  # None when nothing came within 5 s
        if message is None:
            raise SystemExit("nothing received within 5 s")
        print(f"received: {message.text}")
