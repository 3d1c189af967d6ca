#!/usr/bin/env python3
"""Golden renderings of chat templates for data/chat_test.go.

Renders conversations with Python's Jinja2 the way HF transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols; raise_exception and strftime_now globals;
messages, bos_token, eos_token, add_generation_prompt), for:

  - the chat_template of data/assets/llama3-tokenizer_config.json
    (the checkpoint's own template), with its bos_token and eos_token;
  - memtrain's built-in Llama 2 and Llama 3 formats (data/chat.go's
    Llama2ChatTemplate and Llama3ChatTemplate, read from that file so that
    the two cannot drift), with the llama2 and llama3 special tokens;
  - a Llama 3.1-style template that prints strftime_now's date, and Meta's
    Llama 3.2 Instruct template itself (data/testdata/chat/
    llama3.2-instruct.jinja, verbatim from the chat template of
    Llama-3.2-1B-Instruct as github.com/ardanlabs/jinja v1.8.0's testdata
    holds it), which reads strftime_now through "is defined" tests.

It writes data/testdata/chat/golden.json: the rendered STRINGS. The test
compares memtrain's rendered string with each, and tokenizes both with
memtrain's tokenizer (proven equal to HF tokenizers by data/tokenizer's
golden tests), so that equal strings are equal ids; no HF tokenizer is
needed here, and the tests never run Python.

Run once from the repository root with a Python that has jinja2 (3.1.6 made
the fixture): python3 scripts/chatgolden/gen.py
"""
import datetime
import json
import os
import re

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)  # the fixed date of the tests


def go_const(name):
    src = open(os.path.join(ROOT, "data", "chat.go"), encoding="utf-8").read()
    m = re.search(name + r' = ("(?:[^"\\]|\\.)*")', src)
    return json.loads(m.group(1))  # a Go interpreted string literal is JSON here


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def strftime_now(fmt):
    return NOW.strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[jinja2.ext.loopcontrols])
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

LLAMA31 = (
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = \"\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
    "{{- \"Today Date: \" + strftime_now(\"%d %b %Y\") + \"\\n\\n\" }}"
    "{{- system_message }}{{- \"<|eot_id|>\" }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

llama3_cfg = json.load(open(os.path.join(ROOT, "data", "assets", "llama3-tokenizer_config.json")))
TEMPLATES = {
    "config:llama3": (llama3_cfg["chat_template"], llama3_cfg["bos_token"], llama3_cfg["eos_token"]),
    "builtin:llama2": (go_const("Llama2ChatTemplate"), "<s>", "</s>"),
    "builtin:llama3": (go_const("Llama3ChatTemplate"), "<|begin_of_text|>", "<|end_of_text|>"),
    "llama3.1-style": (LLAMA31, "<|begin_of_text|>", "<|end_of_text|>"),
    "llama3.2-instruct": (open(os.path.join(ROOT, "data", "testdata", "chat", "llama3.2-instruct.jinja"),
                               encoding="utf-8").read(), "<|begin_of_text|>", "<|end_of_text|>"),
}

U, A, S = "user", "assistant", "system"
CONVERSATIONS = {
    "single": [(U, "What is the capital of France?"), (A, "Paris.")],
    "system": [(S, "You are a terse assistant."), (U, "Name a prime."), (A, "Seven.")],
    "multi-turn": [(U, "Hi!"), (A, "Hello. How can I help?"), (U, "Count to three."), (A, "One, two, three."),
                   (U, "Thanks"), (A, "  You're welcome.  ")],
    "system-multi": [(S, "Answer in French."), (U, "Good morning"), (A, "Bonjour"), (U, "Good night"), (A, "Bonne nuit")],
    # alpaca records as data.ParseChatRecord turns them into turns
    "alpaca-input": [(U, "Translate to German.\n\nThe cat sleeps."), (A, "Die Katze schläft.")],
    "alpaca-no-input": [(U, "Give a synonym of happy."), (A, "Joyful")],
    "unicode": [(U, "日本語で挨拶して 🙂"), (A, "こんにちは！😀 Ça va? naïve café — “quotes”")],
    "newlines": [(U, "Line one\nLine two\n\n  indented"), (A, "\n\nA\n\nB\n")],
}

out = []
for tname, (src, bos, eos) in TEMPLATES.items():
    tmpl = env.from_string(src)
    for cname, conv in CONVERSATIONS.items():
        msgs = [{"role": r, "content": c} for r, c in conv]
        for gen in (False, True):
            try:
                s = tmpl.render(messages=msgs, bos_token=bos, eos_token=eos, add_generation_prompt=gen)
            except jinja2.exceptions.TemplateError as e:
                s, err = None, str(e)
            else:
                err = None
            out.append({"template": tname, "conversation": cname, "messages": msgs,
                        "add_generation_prompt": gen, "rendered": s, "error": err})

path = os.path.join(ROOT, "data", "testdata", "chat", "golden.json")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w", encoding="utf-8") as f:
    json.dump({"generator": "scripts/chatgolden/gen.py", "jinja2": jinja2.__version__,
               "templates": {k: v[0] for k, v in TEMPLATES.items()},
               "now": NOW.isoformat(), "cases": out}, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(os.path.relpath(path, ROOT), len(out), "cases")
