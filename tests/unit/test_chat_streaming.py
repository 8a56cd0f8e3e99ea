"""`pallas chat` renders the agent's text as it streams, on a terminal; elsewhere lines as before."""

from __future__ import annotations

import io

from rich.console import Console

from pallas_runtime.commands.chat.display import TurnDisplay

MESSAGES = [
    "harper step 1 (llm)",
    "harper text: Let me",
    "harper text:  ask.",
    "harper step 2 (tool)",
    "researcher/send_message: started",
    "researcher/send_message: researcher step 1 (llm)",
    "researcher/send_message: researcher text: Three",
    "researcher/send_message: researcher text:  sources.",
    "researcher/send_message: completed",
    "harper step 3 (llm)",
    "harper text: Found",
    "harper text:  three.",
]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def terminal_display() -> tuple[TurnDisplay, io.StringIO, io.StringIO]:
    err, out = Terminal(), io.StringIO()
    display = TurnDisplay(err, answer=out)
    display.console = Console(
        file=err,
        force_terminal=True,
        color_system=None,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=True,
    )
    return display, err, out


async def feed(display: TurnDisplay) -> None:
    for message in MESSAGES:
        await display.progress(0, None, message)


async def test_on_a_terminal_the_agents_text_streams_to_stdout_and_is_not_printed_twice() -> None:
    display, err, out = terminal_display()
    with display.working():
        await feed(display)
    assert display.finish_streamed("Found three.")
    assert out.getvalue() == "Let me ask.\nFound three.\n"
    shown = err.getvalue()
    assert "[researcher] Three sources." in shown
    assert "researcher/send_message: started" in shown
    assert "researcher/send_message: completed" in shown
    assert shown.index("[researcher]") < shown.index("researcher/send_message: completed")


async def test_an_answer_that_did_not_stream_is_printed_as_before() -> None:
    display, _, out = terminal_display()
    with display.working():
        await display.progress(1, None, "harper step 1 (llm)")
    assert not display.finish_streamed("the answer")
    assert out.getvalue() == ""


async def test_off_a_terminal_every_message_is_a_line_and_stdout_gets_only_the_answer() -> None:
    err, out = io.StringIO(), io.StringIO()
    display = TurnDisplay(err, answer=out)
    with display.working():
        await feed(display)
    assert not display.finish_streamed("Found three.")
    assert out.getvalue() == ""
    # A writer's run of pieces is one line; the agent's final text is the answer's (stdout).
    assert err.getvalue().splitlines() == [
        "… harper step 1 (llm)",
        "… harper text: Let me ask.",
        "… harper step 2 (tool)",
        "… researcher/send_message: started",
        "… researcher/send_message: researcher step 1 (llm)",
        "… researcher/send_message: researcher text: Three sources.",
        "… researcher/send_message: completed",
        "… harper step 3 (llm)",
    ]
