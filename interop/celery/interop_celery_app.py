"""A minimal Celery app used by the Warren interop tests.

The broker URL comes from AMQP_URL (amqp://... is mapped to kombu's pyamqp
transport) and the task queue name from CELERY_QUEUE, so that concurrent runs
against a shared broker do not see each other's tasks. No result backend is
used: the task writes its result to a file whose path is a task argument.
"""

import os

from celery import Celery


def broker_url():
    url = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    if url.startswith("amqp://"):
        url = "pyamqp://" + url[len("amqp://"):]
    return url


QUEUE = os.environ.get("CELERY_QUEUE", "warren-interop")

app = Celery("interop_celery_app", broker=broker_url())
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    result_backend=None,
    task_acks_late=True,           # exercise manual basic.ack after the task ran
    worker_prefetch_multiplier=1,  # basic.qos prefetch_count=1
    broker_connection_timeout=10,
    broker_connection_retry=False,
    broker_connection_max_retries=0,
    worker_hijack_root_logger=False,
    enable_utc=True,
)


@app.task(name="interop.add")
def add(x, y, out_path):
    """Write x+y to out_path atomically and return it."""
    result = x + y
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % result)
    os.replace(tmp, out_path)
    return result


@app.task(name="interop.concat", bind=True)
def concat(self, parts, out_path, sep="-"):
    """Join parts with sep, also recording the delivery info of the task."""
    info = self.request.delivery_info or {}
    text = sep.join(parts) + "|" + str(info.get("routing_key", ""))
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out_path)
    return text
