#!/usr/bin/python3
"""Drives a Celery worker through the broker at AMQP_URL.

Starts `celery worker --pool=solo -c 1` as a subprocess on a private queue,
waits until it is ready (and answers a broadcast ping), sends tasks through
the broker, polls the files the tasks write their results to, then stops the
worker with SIGTERM (warm shutdown) and checks it exited cleanly.

Exit status 0 on success, 1 on failure (with the worker's log printed).
Every wait is bounded.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
# The worker runs with the interpreter running this driver (the Go test
# passes /usr/bin/python3, or $WARREN_INTEROP_PYTHON).
PYTHON = sys.executable

READY_TIMEOUT = 60
TASK_TIMEOUT = 30
STOP_TIMEOUT = 30


class Failure(Exception):
    pass


def log(msg):
    print("[run_celery] %s" % msg, flush=True)


def wait_for(cond, timeout, what, worker=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if worker is not None and worker.poll() is not None:
            raise Failure("worker exited with %s while waiting for %s"
                          % (worker.returncode, what))
        time.sleep(0.1)
    raise Failure("timed out after %ss waiting for %s" % (timeout, what))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def main():
    url = os.environ.get("AMQP_URL")
    if not url:
        raise Failure("AMQP_URL is not set")
    run_id = uuid.uuid4().hex[:10]
    queue = "interop.celery.%s" % run_id
    nodename = "interop-%s@%s" % (run_id, socket.gethostname())
    os.environ["CELERY_QUEUE"] = queue
    sys.path.insert(0, HERE)

    tmp = tempfile.mkdtemp(prefix="warren-celery-")
    worker_log = os.path.join(tmp, "worker.log")
    env = dict(os.environ, CELERY_QUEUE=queue, PYTHONUNBUFFERED="1")
    cmd = [PYTHON, "-m", "celery", "-A", "interop_celery_app", "worker",
           "--pool=solo", "-c", "1", "-Q", queue, "-n", nodename,
           "--loglevel=INFO"]
    log("starting worker: %s" % " ".join(cmd))
    start = time.monotonic()
    logf = open(worker_log, "w")
    worker = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=logf,
                              stderr=subprocess.STDOUT, start_new_session=True)
    ok = False
    try:
        wait_for(lambda: " ready." in (read(worker_log) or ""), READY_TIMEOUT,
                 "worker ready", worker)
        log("worker ready after %.1fs" % (time.monotonic() - start))

        from interop_celery_app import app, add, concat

        # Broadcast ping over the pidbox fanout exchange, reply on a reply queue.
        replies = app.control.ping(destination=[nodename], timeout=5.0)
        log("ping replies: %r" % (replies,))
        if not any(nodename in r for r in replies):
            raise Failure("worker did not answer ping: %r" % (replies,))

        out1 = os.path.join(tmp, "add.out")
        out2 = os.path.join(tmp, "concat.out")
        outs = [os.path.join(tmp, "add-%d.out" % i) for i in range(5)]
        add.apply_async(args=(2, 3, out1))
        concat.apply_async(args=(["a", "b", "c"], out2), kwargs={"sep": "+"})
        for i, p in enumerate(outs):
            add.delay(i, 100, p)
        log("sent %d tasks" % (2 + len(outs)))

        wait_for(lambda: read(out1) is not None, TASK_TIMEOUT, "add result", worker)
        if read(out1) != "5\n":
            raise Failure("add(2, 3) wrote %r, want '5\\n'" % read(out1))
        wait_for(lambda: read(out2) is not None, TASK_TIMEOUT, "concat result", worker)
        if read(out2) != "a+b+c|" + queue:
            raise Failure("concat wrote %r" % read(out2))
        wait_for(lambda: all(read(p) is not None for p in outs), TASK_TIMEOUT,
                 "batch results", worker)
        for i, p in enumerate(outs):
            if read(p) != "%d\n" % (i + 100):
                raise Failure("add(%d, 100) wrote %r" % (i, read(p)))
        log("all task results correct after %.1fs" % (time.monotonic() - start))

        # Warm shutdown.
        worker.send_signal(signal.SIGTERM)
        try:
            rc = worker.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failure("worker did not stop within %ss of SIGTERM" % STOP_TIMEOUT)
        if rc != 0:
            raise Failure("worker exited with status %d" % rc)
        log("worker stopped cleanly")

        # The task queue must be empty (all tasks acked); then delete it.
        with app.connection_for_write() as conn:
            chan = conn.default_channel
            _name, messages, consumers = chan.queue_declare(queue=queue, passive=True)
            if messages != 0 or consumers != 0:
                raise Failure("queue %s has %d messages, %d consumers after shutdown"
                              % (queue, messages, consumers))
            chan.queue_delete(queue=queue)
        ok = True
    finally:
        if worker.poll() is None:
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            worker.wait(timeout=10)
        logf.close()
        if not ok:
            print("----- worker log -----", flush=True)
            print(read(worker_log) or "", flush=True)
            print("----- end worker log -----", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    log("PASS in %.1fs" % (time.monotonic() - start))


def on_sigterm(signum, _frame):
    # Raised inside main() so that its finally block stops the worker.
    raise Failure("terminated by signal %d" % signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        main()
    except Failure as e:
        print("FAIL: %s" % e, flush=True)
        sys.exit(1)
