"""server/messages/replay_cli.py: ``gramserve parse``, its output and its errors."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit._front import WEATHER_TOOL
from server.messages.replay_cli import main

ROOT = Path(__file__).resolve().parents[2]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_message_from_stdin() -> None:
    code, out, err = _run(["--tool-call-parser", "hermes"], "Sure. " + CALL)
    assert code == 0, err
    msg = json.loads(out)
    assert msg["content"] == "Sure. " and msg["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert "finish_reason: tool_calls" in err


def test_stream_prints_one_delta_a_line(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text(CALL)
    code, out, _ = _run(["--tool-call-parser", "hermes", "--stream", "--per-char", str(tmp_path / "out.txt")])
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and lines[0]["role"] == "assistant" and lines[0]["content"] is None and lines[-1] == {}
    args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in lines if "tool_calls" in d)
    assert json.loads(args) == {"city": "Paris"}
    _, chunked, _ = _run(["--tool-call-parser", "hermes", "--stream", "--chunk", "30", str(tmp_path / "out.txt")])
    assert len(chunked.splitlines()) < len(lines)


def test_jsonl_one_result_a_line_and_bad_lines_reported(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps({"tools": [WEATHER_TOOL]}))
    log = "\n".join([
        json.dumps({"id": "a", "model_output": CALL}),
        json.dumps({"model_output": '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'}),
        json.dumps({"model_output": ["<think>hm</think>", "ok"], "tool_call_parser": "none",
                    "reasoning_parser": "qwen3"}),
        "not json",
        json.dumps({"output": "x"}),
    ])
    code, out, _ = _run(["--tool-call-parser", "hermes", "--jsonl", "--tools", str(tools)], log)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and len(rows) == 5
    assert rows[0]["id"] == "a" and rows[0]["finish_reason"] == "tool_calls"
    assert rows[1]["message"]["tool_calls"] is None and "rm" in rows[1]["notes"][0]  # not among the tools
    assert rows[2]["message"]["reasoning_content"] == "hm" and rows[2]["message"]["content"] == "ok"
    assert rows[3]["line"] == 4 and "not JSON" in rows[3]["error"]
    assert rows[4]["line"] == 5 and "model_output" in rows[4]["error"]


@pytest.mark.parametrize("line", [{"tool_call_parser": ["hermes"]}, {"tool_call_parser": 5},
                                  {"reasoning_parser": {"name": "qwen3"}}, {"tools": 5}, {"tools": [5]}])
def test_a_jsonl_line_with_fields_of_the_wrong_type_is_reported_and_the_rest_goes_on(line: dict[str, Any]) -> None:
    log = json.dumps({"model_output": CALL, **line}) + "\n" + json.dumps({"model_output": CALL})
    code, out, _ = _run(["--tool-call-parser", "hermes", "--jsonl"], log)
    rows = [json.loads(row) for row in out.splitlines()]
    assert code == 1 and rows[0]["line"] == 1 and next(iter(line)) in rows[0]["error"]
    assert rows[1]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("argv,message", [
    (["--tool-call-parser", "hermes", "/nonexistent/out.txt"], "cannot read /nonexistent/out.txt"),
    (["--tool-call-parser", "hermes", "--chunk", "0", "--stream"], "--chunk must be at least 1"),
    (["--tool-call-parser", "hermes", "--per-char"], "only apply with --stream"),
    (["--tool-call-parser", "hermes", "--tools", "{tools}"], "must hold a JSON list of tools"),
    (["--tool-call-parser", "hermes", "--tools", "{custom}"], "custom tools are not replayed"),
])
def test_bad_input_is_a_message_and_exit_2(tmp_path: Path, argv: list[str], message: str) -> None:
    (tmp_path / "tools.json").write_text('{"not": "tools"}')
    (tmp_path / "custom.json").write_text(json.dumps([{"type": "custom", "custom": {"name": "c"}}]))
    argv = [a.format(tools=tmp_path / "tools.json", custom=tmp_path / "custom.json") for a in argv]
    code, out, err = _run(argv, "text")
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_unknown_parser_names_the_choices(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--tool-call-parser", "qwen9"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "qwen9" in err and "llama3_json" in err and "mistral_v13" in err


def test_the_command_imports_no_engine() -> None:
    """``gramserve parse`` runs without vLLM, torch or the web stack: it starts in well under a second."""
    code = ("import sys; from server.__main__ import main; rc = main(['parse', '--tool-call-parser', 'hermes']); "
            "heavy = {'vllm', 'torch', 'transformers', 'fastapi', 'xgrammar', 'numpy', 'pydantic'}; "
            "print(rc, sorted({m.split('.')[0] for m in sys.modules} & heavy))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, input=CALL, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"


@pytest.mark.parametrize("parser,output", [
    ("kimi_k3", '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>'
                "3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n3\n</parameter>\n</function>\n</tool_call>"),
    ("gemma4", "<|tool_call>call:f{a:3}<tool_call|>"),
])
@pytest.mark.parametrize("schema", [{"anyOf": 5}, {"oneOf": True, "enum": 5}, {"type": [[1]]}, 5])
def test_tools_whose_schemas_no_meta_schema_checked_type_the_arguments(tmp_path: Path, parser: str, output: str,
                                                                     schema: Any) -> None:
    """``--tools`` are read as given (no server checked them): a parameter's schema of any JSON shape
    types nothing, and the call still reads (was a TypeError traceback)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": schema}}}}]
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    code, out, err = _run(["--tool-call-parser", parser, "--tools", str(tmp_path / "tools.json")], output)
    assert code == 0, err
    assert json.loads(json.loads(out)["tool_calls"][0]["function"]["arguments"]) == {"a": 3}
