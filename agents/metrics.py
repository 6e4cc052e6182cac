"""metrics: the one stage that consumes execution metrics — windows, then cost models.

Every metric is read and parsed once, in batches: the batch's well-formed metrics go to the
window aggregation (agents/window.py) and to the learner (agents/learn.py); a malformed one is
dead-lettered once. Two agents on the topic (as before) had Faust deliver, and each stage
parse, every metric twice: the per-event stream cost was most of the metric path's.
"""

from __future__ import annotations

import time
from typing import Any

from agents.learn import learn_batch, parsed_batch
from agents.window import window_batch
from app import observability
from app.main import app, settings, topics

STAGE_CPU = "switchyard_metric_stage_cpu_seconds_total"


@app.agent(topics.metrics, concurrency=1)
async def metrics(stream: Any) -> None:
    """Window and learn each batch of metrics."""
    async for batch in stream.take_events(settings.metric_batch_size,
                                          within=settings.metric_batch_within_s):
        # A rejected metric's dead letter names the stage ``learn``, as the contract lists it.
        began = time.thread_time()
        parsed = await parsed_batch("learn", batch)
        observability.inc(STAGE_CPU, time.thread_time() - began, step="parse")
        if parsed.rows:
            window_batch(parsed)
            await learn_batch(parsed)
