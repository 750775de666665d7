#!/usr/bin/env python3
"""A model program for Substrat's script provider (substrat ... --model PATH).

It plays native mode over the JSON-lines protocol: it echoes each line of
the prompt, skips message headers, and turns each "!tool {json args}" line
into a tool call. See the doc comment of package script for the protocol.
"""
import json
import re
import sys

# The daemon frames its prompts (Go package prompt): a preamble, and each
# message between a header and an end line, all three starting with a tag
# new in every prompt. A line of a body that began with "[" carries an
# added backslash.
PREAMBLE = re.compile(r"^\[([0-9a-f]{16}) substrat\] ")
ESCAPED = re.compile(r"^(\s*)\\(\\*\[)")


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def receive():
    line = sys.stdin.readline()
    if not line:
        sys.exit("stdin closed before the result came")
    return json.loads(line)


def main():
    turn = receive()
    assert turn["type"] == "turn", turn
    echoed, results = [], []
    lines = turn["prompt"].split("\n")
    m = PREAMBLE.match(lines[0])
    tag = m.group(1) if m else None
    if tag:
        lines = lines[1:]
    for line in lines:
        line = line.rstrip("\r")
        text = line.strip()
        if not text:
            continue
        if tag:
            if text.startswith("[" + tag + " ") and text.endswith("]"):
                continue
            line = ESCAPED.sub(r"\1\2", line)
            text = line.strip()
        elif text.startswith("[message ") and text.endswith("]"):
            continue
        if text.startswith("!") and len(text) > 1:
            name, _, raw = text[1:].partition(" ")
            try:
                args = json.loads(raw) if raw.strip() else {}
            except ValueError:
                args = raw  # not an object: Substrat answers with an error
            # No "id": Substrat makes a deterministic one.
            send({"type": "call", "name": name, "args": args})
            result = receive()
            prefix = "error: " if result["is_error"] else ""
            results.append(f"{name} -> {prefix}{result['text']}")
        else:
            send({"type": "text", "text": line})
            echoed.append(line)
    text = "\n".join(echoed + results)
    send({"type": "done", "text": text,
          "usage": {"input_tokens": len(turn["prompt"]) // 4,
                    "output_tokens": len(text) // 4, "cost_usd": 0}})


if __name__ == "__main__":
    main()
