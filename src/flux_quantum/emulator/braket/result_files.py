"""The result files of the emulated Braket quantum tasks, written into the emulated S3.

This module owns publishing what the real service writes once a task has ended, each
task once: ``{outputS3Directory}/results.json`` of a COMPLETED program (its simulated
``GateModelTaskResult``, task metadata, and a managed simulator's ``executionDuration``),
and a program set's files where Braket lays them out (results.json, metadata.json and per
program its results.json, program.json and one file per executable) when it COMPLETED or
FAILED. It must never publish a task before its device's queue says it ended and its
simulation's outcome is in, and never
sleep or read the wall clock; it runs with the side's lock held, so a task's results.json
appears atomically with its end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from flux_quantum.emulator.bill import execution_ms
from flux_quantum.emulator.braket.devices import Devices
from flux_quantum.emulator.braket.s3 import ObjectStore
from flux_quantum.emulator.braket.task_record import TaskRecord
from flux_quantum.emulator.braket.wire import iso8601
from flux_quantum.emulator.clock import timestamp
from flux_quantum.emulator.simulate import read_program_set

RESULTS_FILENAME = "results.json"


class ResultFiles:
    """Writes each ended task's result files into ``store``, once."""

    def __init__(self, devices: Devices, store: ObjectStore) -> None:
        self.clock = devices.clock
        self._devices = devices
        self._store = store
        self._published: set[str] = set()

    def publish(
        self,
        tasks: Iterable[TaskRecord],
        now: float,
        result_of: Callable[[str], dict[str, Any] | None],
    ) -> None:
        """Write results.json for every task that has COMPLETED by ``now`` and whose
        simulated result (``result_of``) has come in (lock held)."""
        for task in tasks:
            if task.arn in self._published:
                continue
            progress = self._devices.queue(task.device_arn).progress(task.arn, now)
            if progress.status in ("QUEUED", "RUNNING", "CANCELLING"):
                continue
            result = result_of(task.arn)
            if progress.status == "COMPLETED" and result is None:
                continue  # its simulation has not been settled yet
            self._published.add(task.arn)
            if task.programs and progress.status in ("COMPLETED", "FAILED"):
                self._publish_program_set(task, progress.status, progress.ended_at or now, result)
                continue
            if progress.status != "COMPLETED" or result is None:
                continue
            document = json.loads(json.dumps(result))
            metadata = document.setdefault("taskMetadata", {})
            metadata["id"] = task.arn
            metadata["deviceId"] = task.device_arn
            metadata["shots"] = task.shots
            metadata["createdAt"] = iso8601(timestamp(self.clock, task.created_t))
            if progress.ended_at is not None:
                metadata["endedAt"] = iso8601(timestamp(self.clock, progress.ended_at))
            spec = self._devices.spec(task.device_arn)
            started, ended = progress.started_at, progress.ended_at
            if (
                spec is not None
                and spec.type == "SIMULATOR"
                and started is not None
                and ended is not None
            ):
                # What the managed simulators report and Braket bills (3 s minimum).
                document.setdefault("additionalMetadata", {})["simulatorMetadata"] = {
                    "braketSchemaHeader": {
                        "name": "braket.task_result.simulator_metadata",
                        "version": "1",
                    },
                    "executionDuration": execution_ms(started, ended),
                }
            when = timestamp(self.clock, progress.ended_at or now)
            body = json.dumps(document).encode()
            key = f"{task.directory}/{RESULTS_FILENAME}"
            self._store.put(task.bucket, key, body, when, "application/json")

    def _publish_program_set(
        self, task: TaskRecord, status: str, ended: float, result: dict[str, Any] | None
    ) -> None:
        """Write a program set's results where Braket does (lock held): results.json
        naming the other files relative to ``s3Location``, metadata.json, and for program
        i ``programs/i/results.json``, its ``program.json`` and one
        ``executables/j.json`` per executable (its measurements, or for a FAILED task the
        failure)."""
        if result is None:  # it failed: its programs, as the create read them
            programs = read_program_set(task.action)
            result = {
                "programs": [program.document() for program in programs],
                "runs": [[{}] * program.executables for program in programs],
            }
        when = timestamp(self.clock, ended)
        completed = status == "COMPLETED"
        failed = {
            "failureReason": task.failure_reason or "Task failed",
            "retryable": False,
            "category": "DEVICE",
        }

        def put(name: str, document: dict[str, Any]) -> None:
            body = json.dumps(document).encode()
            self._store.put(task.bucket, f"{task.directory}/{name}", body, when, "application/json")

        executables_metadata = []
        for index, (program, runs) in enumerate(
            zip(result["programs"], result["runs"], strict=True)
        ):
            names = []
            for inputs_index, run in enumerate(runs):
                if completed:
                    document: dict[str, Any] = {
                        "braketSchemaHeader": _header("program_set_executable_result"),
                        "inputsIndex": inputs_index,
                        "measurements": run.get("measurements"),
                        "measuredQubits": run.get("measuredQubits"),
                    }
                else:
                    document = {
                        "braketSchemaHeader": _header("program_set_executable_failure"),
                        "inputsIndex": inputs_index,
                        "failureMetadata": failed,
                    }
                names.append(f"executables/{inputs_index}.json")
                put(f"programs/{index}/{names[-1]}", document)
            put(f"programs/{index}/program.json", program)
            put(
                f"programs/{index}/{RESULTS_FILENAME}",
                {
                    "braketSchemaHeader": _header("program_result"),
                    "executableResults": names,
                    "source": "program.json",
                    "additionalMetadata": {},
                },
            )
            executables_metadata.append({"executables": [{} if completed else failed] * len(runs)})
        put(
            "metadata.json",
            {
                "braketSchemaHeader": _header("program_set_task_metadata"),
                "id": task.arn,
                "deviceId": task.device_arn,
                "requestedShots": task.shots,
                "successfulShots": task.shots if completed else 0,
                "programMetadata": executables_metadata,
                "createdAt": iso8601(timestamp(self.clock, task.created_t)),
                "endedAt": iso8601(when),
                "status": status,
                "totalFailedExecutables": 0 if completed else task.executables,
            },
        )
        put(
            RESULTS_FILENAME,
            {
                "braketSchemaHeader": _header("program_set_task_result"),
                "programResults": [
                    f"programs/{i}/{RESULTS_FILENAME}" for i in range(task.programs)
                ],
                "s3Location": [task.bucket, task.directory],
                "taskMetadata": "metadata.json",
            },
        )


def _header(name: str) -> dict[str, str]:
    """The schema header of a ``braket.task_result`` document."""
    return {"name": f"braket.task_result.{name}", "version": "1"}
