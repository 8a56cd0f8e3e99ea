"""One operator process: serve probes and metrics, win the Lease, run kopf, shut down cleanly.

kopf runs in a thread with an event loop of its own. At shutdown kopf cancels every task of its
loop that it did not find there when it started; on a loop of its own those are only its own
and the operator's, never a caller's (an embedding application, a test runner). How the pieces
around kopf fit: docs/operator.md, "The engine around kopf".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading

import kopf
from kopf._core.engines.peering import Identity  # private, pinned by tests/unit/operator/test_kopf_pin.py
from lightkube import KubeConfig
from lightkube.core.exceptions import ConfigError

from pallas_io.commands import EXIT_FAILURE
from pallas_operator.engine.context import Operator
from pallas_operator.k8s.client import make_client
from pallas_operator.k8s.lease import LeaderElector, LeaseConfig
from pallas_operator.k8s.lightkube_cluster import LightkubeCluster
from pallas_operator.metrics import OperatorMetrics
from pallas_operator.probe_server import ProbeEndpoints
from pallas_operator.reconcile.orphans import sweep_orphans
from pallas_operator.settings import OperatorSettings
from pallas_operator.wiring import RECONCILERS, build_kopf_registry, existing_objects

log = logging.getLogger(__name__)
LOST_LEADERSHIP = 1
POLL = 0.2


class Runner:
    """Runs the operator until stopped; exposes its state to probes and tests."""

    def __init__(self, settings: OperatorSettings, config: KubeConfig | None = None) -> None:
        self.settings = settings
        self.config = config or KubeConfig.from_env()
        self.metrics = OperatorMetrics()
        self.stop = asyncio.Event()
        self.leading = threading.Event()
        self.ready = threading.Event()
        """Set once the world holds every object that existed, the orphan sweep ran and the work
        queue runs (`engine.startup`); what /readyz answers."""
        self.operator: Operator | None = None
        self._kopf_stop = threading.Event()
        self.http = ProbeEndpoints(self.metrics.render, ready=self.ready.is_set, limits=settings.http_limits)

    async def run(self) -> int:
        """Run until `stop` is set (0) or leadership is lost (1)."""
        settings = self.settings
        if settings.http_port is not None:
            await self.http.start(settings.http_host, settings.http_port)
            log.info("probes and metrics on http://%s:%d", settings.http_host, self.http.port)
        client = make_client(self.config)
        elector = LeaderElector(
            client,
            LeaseConfig(
                name=settings.lease_name,
                namespace=settings.lease_namespace,
                identity=settings.identity,
                duration=settings.lease_duration,
                renew_every=settings.lease_renew_every,
                retry_every=settings.lease_retry_every,
            ),
        )
        try:
            if not await elector.acquire(self.stop):
                return 0
            self.leading.set()
            return await self._lead(elector)
        finally:
            self.leading.clear()
            await self.http.stop()
            await client.close()

    async def _lead(self, elector: LeaderElector) -> int:
        self._kopf_stop.clear()
        operator = asyncio.create_task(asyncio.to_thread(self._kopf_thread), name="kopf-thread")
        hold = asyncio.create_task(elector.hold(self.stop), name="lease")
        stopped = asyncio.create_task(self.stop.wait(), name="stop")
        await asyncio.wait({operator, hold, stopped}, return_when=asyncio.FIRST_COMPLETED)
        lost = hold.done() and not self.stop.is_set()
        self._kopf_stop.set()
        for task in (hold, stopped):
            task.cancel()
        try:
            await operator
        except Exception:
            log.exception("the operator failed")
            lost = True
        if lost:
            return LOST_LEADERSHIP
        await elector.release()
        return 0

    def _kopf_thread(self) -> None:
        asyncio.run(self._kopf_main())

    async def _kopf_main(self) -> None:
        client = make_client(self.config)
        cluster = LightkubeCluster(client)
        operator = self.operator = Operator(self.settings, cluster, self.metrics, RECONCILERS, self.ready)
        kopf_stop = asyncio.Event()
        kopf_started = asyncio.Event()
        task = asyncio.create_task(
            kopf.operator(
                registry=build_kopf_registry(operator),
                clusterwide=not self.settings.namespaces,
                namespaces=self.settings.namespaces,
                standalone=True,  # the Lease, not kopf peering, decides who acts
                # Ours, so kopf does not derive one from the user name: a container's numeric
                # user (65532) has no passwd entry and getpass.getuser() raises.
                identity=Identity(self.settings.identity),
                stop_flag=kopf_stop,
                ready_flag=kopf_started,  # start-up activities done; not yet able to act
            ),
            name="kopf",
        )
        startup = asyncio.create_task(self._track_startup(operator, kopf_started), name="startup")
        try:
            while not task.done() and not self._kopf_stop.is_set():
                await asyncio.wait({task}, timeout=POLL)
            # Our own tasks first, so kopf finds nothing left to wait for or cancel.
            startup.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await startup
            await operator.close()
            kopf_stop.set()
            await task
        finally:
            self.ready.clear()
            self.metrics.ready.set(0)
            await client.close()

    @staticmethod
    async def _track_startup(operator: Operator, kopf_started: asyncio.Event) -> None:
        await kopf_started.wait()
        await operator.startup.watch(
            lambda: existing_objects(operator),
            before_ready=lambda: sweep_orphans(operator),  # needs the whole world, no reconcile yet
        )


async def run_operator(settings: OperatorSettings) -> int:
    """The `pallas operator` process: stops gracefully on SIGTERM/SIGINT."""
    try:
        runner = Runner(settings)
    except ConfigError as exc:  # neither in-cluster credentials nor a usable kubeconfig
        log.error("pallas operator: %s", exc)  # noqa: TRY400 - a traceback would not help the user
        return EXIT_FAILURE
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop.set)
    return await runner.run()
