"""Request/reply over a temporary queue with the async API (any anyio backend).

A service consumes requests from a queue and answers to each message's reply-to; the client
sends requests with a temporary queue as reply-to and correlates answers by correlation id.
After a failover the temporary queue is created again on the new broker and the client's
``TemporaryQueue`` object follows its new address (F6), so later requests carry the new one.

    python examples/request_reply.py amqp://127.0.0.1:5672
"""

from __future__ import annotations

import argparse
import sys

import anyio

import haclient.aio as aio
from haclient import AckMode, Message, Queue, TextMessage


async def serve(connection: aio.Connection, service: Queue, count: int) -> None:
    """Answer ``count`` requests: the reply goes to the request's reply-to."""
    async with await connection.create_session(AckMode.AUTO) as session:
        requests = await session.create_consumer(service)
        replies = await session.create_producer()  # anonymous: the destination per send
        for _ in range(count):
            request = await requests.receive(timeout=10)
            if request is None or request.reply_to is None:
                return
            reply = TextMessage(request.text.upper())  # type: ignore[attr-defined]
            reply.correlation_id = request.message_id
            await replies.send(request.reply_to, reply)


async def ask(connection: aio.Connection, service: Queue, questions: list[str]) -> list[str]:
    """Send each question and wait for its answer on a temporary queue."""
    answers = []
    async with await connection.create_session(AckMode.AUTO) as session:
        inbox = await session.create_temporary_queue()
        consumer = await session.create_consumer(inbox)
        producer = await session.create_producer(service)
        for question in questions:
            request = TextMessage(question)
            request.reply_to = inbox
            await producer.send(request)
            answer: Message | None = await consumer.receive(timeout=10)
            if answer is None or answer.correlation_id != request.message_id:
                raise RuntimeError(f"no answer to {question!r}")
            answers.append(answer.text)  # type: ignore[attr-defined]
    return answers


async def run(url: str) -> int:
    service = Queue("uppercase-service")
    questions = ["hello", "failover", "world"]
    async with aio.connect(url) as connection:
        await connection.start()
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve, connection, service, len(questions))
            answers = await ask(connection, service, questions)
    for question, answer in zip(questions, answers, strict=True):
        print(f"{question} -> {answer}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="a broker URL or a failover:(...) URL")
    args = parser.parse_args(argv)
    return anyio.run(run, args.url)


if __name__ == "__main__":
    sys.exit(main())
