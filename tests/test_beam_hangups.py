"""The thread-exception filter of the suite drops Beam's channel hang-ups and nothing else."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from beam_hangups import is_beam_harness_hang_up


class _ChannelError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(f"stream ended: {code.name}")
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def _raiser(where: Path, error: BaseException) -> Callable[[], None]:
    """A function whose frame lies in the file ``where``, raising ``error`` when called."""
    namespace: dict[str, object] = {"error": error}
    code = compile("def read_inputs():\n    raise error\n", str(where), "exec")
    exec(code, namespace)
    function = namespace["read_inputs"]
    assert callable(function)
    return function  # type: ignore[no-any-return]


def _thread_exception(target: Callable[[], None]) -> threading.ExceptHookArgs:
    """The excepthook arguments of a thread that runs ``target`` and dies of its exception."""
    seen: list[threading.ExceptHookArgs] = []
    installed = threading.excepthook
    threading.excepthook = seen.append
    try:
        thread = threading.Thread(target=target, name="read_state")
        thread.start()
        thread.join()
    finally:
        threading.excepthook = installed
    assert len(seen) == 1
    return seen[0]


BEAM_WORKER = Path("site-packages") / "apache_beam" / "runners" / "worker" / "data_plane.py"
ELSEWHERE = Path("site-packages") / "beam_dp" / "beam" / "_transform.py"


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED])
def test_a_harness_thread_losing_its_channel_is_dropped(code: grpc.StatusCode) -> None:
    args = _thread_exception(_raiser(BEAM_WORKER, _ChannelError(code)))
    assert is_beam_harness_hang_up(args)


@pytest.mark.parametrize(
    ("where", "error"),
    [
        (BEAM_WORKER, _ChannelError(grpc.StatusCode.INTERNAL)),
        (BEAM_WORKER, _ChannelError(grpc.StatusCode.RESOURCE_EXHAUSTED)),
        (BEAM_WORKER, RuntimeError("a DoFn failed")),
        (BEAM_WORKER, ValueError("UNAVAILABLE")),
        (ELSEWHERE, _ChannelError(grpc.StatusCode.UNAVAILABLE)),
    ],
)
def test_every_other_thread_exception_still_reaches_pytest(
    where: Path, error: BaseException
) -> None:
    args = _thread_exception(_raiser(where, error))
    assert not is_beam_harness_hang_up(args)


def test_the_suite_installs_the_filter_over_pytests_own_hook() -> None:
    hook = threading.excepthook
    assert hook is not threading.__excepthook__
    assert getattr(hook, "__qualname__", "").endswith("pytest_configure.<locals>.hook")
