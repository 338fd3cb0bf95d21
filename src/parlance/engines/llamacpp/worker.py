"""The single engine thread: requests wait in a FIFO queue and run one at a time.

A job whose client left while it waited is dropped without running. (The
continuous-batching scheduler will replace this class behind the same seam.)
"""

from __future__ import annotations

import queue
import threading

from parlance.core.errors import EngineFailure, ParlanceError
from parlance.core.events import Failed, Usage
from parlance.engines.llamacpp.decode import SequenceRunner, SequenceStats
from parlance.engines.llamacpp.job import Job
from parlance.engines.llamacpp.model import LlamaModel


class Worker:
    def __init__(self, model: LlamaModel) -> None:
        self._model = model
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="parlance-llamacpp", daemon=True)
        self.busy = False
        self._current: Job | None = None
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._queue.put(job)

    def close(self) -> bool:
        """Stop after cancelling the running job; True once the thread has ended."""
        self._queue.put(None)
        if (current := self._current) is not None:
            current.cancel()
        self._thread.join(timeout=30)
        return not self._thread.is_alive()

    def _run(self) -> None:
        runner = SequenceRunner(self._model)
        try:
            while (job := self._queue.get()) is not None:
                if job.cancelled:
                    job.close()
                    continue
                self.busy, self._current = True, job
                try:
                    self._run_job(runner, job)
                finally:
                    self.busy, self._current = False, None
        finally:
            runner.close()

    def _run_job(self, runner: SequenceRunner, job: Job) -> None:
        job.ran = True
        try:
            stats: list[SequenceStats] = []
            for seq in job.sequences:
                result = runner.run(job, seq)
                if result is None:
                    return
                stats.append(result)
            job.emit(_usage(job, stats))
        except ParlanceError as exc:
            job.emit(Failed(exc))
        except Exception as exc:  # the stream must end by contract, whatever broke
            job.emit(Failed(EngineFailure(f"The engine failed: {exc}")))
        finally:
            job.close()


def _usage(job: Job, stats: list[SequenceStats]) -> Usage:
    firsts = [s.first_token_at for s in stats if s.first_token_at is not None]
    lasts = [s.last_token_at for s in stats if s.last_token_at is not None]
    return Usage(
        prompt_tokens=sum(s.prompt_tokens for s in stats),
        completion_tokens=sum(s.generated for s in stats),
        first_token_seconds=(firsts[0] - job.created) if firsts else None,
        decode_seconds=(max(lasts) - min(firsts)) if firsts else None,
    )
