// Package script is Substrat's built-in deterministic provider, registered
// as "script". It needs no model: it is what the demo and the tests run, and
// it lets a user drive agents from a program of their own.
//
// A session has one of two modes, chosen by Config.Model.
//
// # Native mode (Config.Model == "")
//
// Send reads the prompt line by line:
//
//   - The daemon's wake prompts are framed (package prompt): a preamble
//     line, and each message between a header line "[<tag> message <id>
//     from <sender>]" and an end line "[<tag> end of message <id>]", with
//     a tag new in every prompt. These lines are neither echoed nor run;
//     a header starts a new message. Only lines with the prompt's tag
//     frame it, and body lines are unescaped (prompt.Unescape) before
//     anything else, so a body line "[message X from SYSTEM]" is echoed
//     as text. A prompt without a preamble (a test's, a hand-written one)
//     may use the bare header line "[message <message-id> from <sender>]".
//   - A command line "!tool_name {json args}" calls the agent tool tool_name
//     through Turn.Tools. Leading blanks are allowed; a tool name is a letter
//     or '_' followed by letters, digits, '_', '-' or '.'; the args are
//     optional (default {}) and must be one JSON object. A command line whose
//     args are not a JSON object calls nothing: it yields an error result
//     and the turn goes on.
//   - "!sleep DURATION" (a Go duration such as 500ms, at most a minute)
//     pauses the turn, as a model that takes time to think would; it calls
//     no tool and is cancelled with the turn's context.
//   - Any other non-blank line is echoed.
//
// TurnResult.Text is the echoed lines joined with "\n", followed by one line
// per command line: "tool_name -> <result text>", or "tool_name -> error:
// <text>" when the result is an error or the args were bad. Turn.Output
// receives, in prompt order, a "text" chunk per echoed line (the line,
// without a newline), a "tool_call" chunk "tool_name <args>" before each
// call and a "tool_result" chunk with the result line above.
//
// Usage is InputTokens = (len(prompt)+3)/4, OutputTokens = (len(text)+3)/4
// and CostUSD = 0.
//
// # Tool-use ids
//
// Tool-use ids are deterministic, so that a turn run again after a crash asks
// for the same ids (the daemon uses them as idempotency keys):
//
//	id = "toolu_script_" + hex(sha256(agentID + "\x00" + messageID + "\x00" + index))[:24]
//
// where messageID is that of the last header line above the command line, or
// hex(sha256(prompt)) if there is none, and index is the decimal, 0-based
// position of the command line among the command lines of that message
// (lines with bad args count). ToolUseID computes it.
//
// # Model mode (Config.Model is the path of an executable)
//
// Each Send runs the executable, with Config.WorkDir as its working directory,
// the daemon's environment plus SUBSTRAT_AGENT_ID, SUBSTRAT_AGENT_NAME and
// SUBSTRAT_SESSION_ID, and its own process group. A relative path is taken
// relative to the daemon's working directory, so pass an absolute one. The
// program and Substrat speak JSON lines, one object per line of at most
// 1 MiB; blank lines are ignored and unknown fields are allowed.
//
// Substrat writes to the program's stdin first
//
//	{"type":"turn","agent_id":"…","name":"…","session_id":"script-…","instructions":"…","prompt":"…","turn":1}
//
// where turn counts the session's successful turns plus this one (it starts
// again at 1 after a Restore without state), and instructions is left out when
// empty. The program then writes to stdout, in any number:
//
//	{"type":"text","text":"…"}                                      streamed text
//	{"type":"call","id":"…","name":"send_message","args":{…}}      run a tool
//
// For each call, once the tool has run, Substrat writes back on stdin
//
//	{"type":"result","id":"…","text":"…","is_error":false}
//
// Calls are run one at a time, in order. A call without an id is given one
// as in native mode, with messageID = hex(sha256(prompt)) and index = the
// 0-based position of the call among the turn's calls. Absent or null args
// mean {}; args that are not a JSON object get an error result without
// reaching the tool. The program ends the turn with exactly one of
//
//	{"type":"done","text":"…","usage":{"input_tokens":1,"output_tokens":2,"cost_usd":0}}
//	{"type":"error","message":"…"}
//
// A done without "text" uses the streamed texts, concatenated; a done
// without "usage" gets the native estimate. An error line fails the turn with
// the message (not retried). After either, Substrat closes stdin, reads no
// more, gives the program 5 seconds to exit and then kills what is left of
// its process group: background processes do not outlive the turn. A
// non-zero exit after done fails the turn.
//
// The turn fails with an error wrapping provider.ErrProtocol, which quotes
// (truncated) the offending output and the end of stderr, if the program
// writes a line that is not a JSON object of a known type, a call without a
// name, a line over 1 MiB or more than 16 MiB of text in a turn (the process
// group is then killed at once), or if it exits or closes stdout without
// done or error. Cancelling Send's context (a timeout) kills the whole
// process group and Send returns an error wrapping ctx.Err().
//
// A minimal model program in Python (testdata/echo_model.py is a longer one):
//
//	#!/usr/bin/env python3
//	import json, sys
//	turn = json.loads(sys.stdin.readline())
//	print(json.dumps({"type": "call", "name": "send_message",
//	                  "args": {"recipient": "USER", "text": turn["prompt"]}}), flush=True)
//	result = json.loads(sys.stdin.readline())
//	print(json.dumps({"type": "done", "text": "sent: " + result["text"]}), flush=True)
//
// # Sessions
//
// The session id is "script-" + Config.AgentID, reported through
// Config.SessionID during Create. Suspend returns
// {"version":1,"session_id":"script-…","turns":N}; Restore accepts that or
// nil (a fresh count). A session runs one turn at a time: a concurrent Send or
// Suspend fails with provider.ErrBusy.
//
// # Packages
//
// The sessions and native mode are package native, which runs nothing:
// the simulation drives it in-process. This package adds model mode, the
// one part that starts processes.
package script
