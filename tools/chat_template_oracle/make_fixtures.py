#!/usr/bin/python3
"""Renders deltaserve's chat-template fixtures with jinja2, configured as transformers does.

The C++ Jinja interpreter (server/jinja) must render every case byte-identically to
transformers' apply_chat_template. This script is the oracle: it rebuilds the environment of
transformers' _compile_jinja_template (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension, the {% generation %} tag, transformers' tojson,
raise_exception and strftime_now) and the context apply_chat_template passes (messages, tools,
documents, add_generation_prompt, the special tokens, the extra kwargs).

Outputs, under --out (default: the repository's tests/fixtures):
  chat_templates/manifest.json          templates, where their source lives, their special tokens
  chat_templates/<name>/cases.jsonl     one conversation per line with the expected rendering
  jinja/expressions.jsonl               small templates exercising language features

Run with Debian's interpreter, which has jinja2:  /usr/bin/python3 make_fixtures.py [--out DIR]
"""

import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# strftime_now() reads this clock; the C++ tests inject the same broken-down time.
FIXED_NOW = datetime.datetime(2025, 7, 26, 14, 5, 9)

# name -> (source path relative to the repository, JSON key holding the template or None,
#          bos_token, eos_token) as the model's tokenizer defines them (None = not defined).
TEMPLATES = {
    "qwen3": ("tests/fixtures/qwen3_tokenizer/tokenizer_config.json", "chat_template", None,
              "<|im_end|>"),
    "qwen3_5": ("tests/fixtures/chat_templates/qwen3_5.jinja", None, None, "<|im_end|>"),
    "chatml": ("tests/fixtures/chat_templates/chatml.jinja", None, None, "<|im_end|>"),
    "llama3_style": ("tests/fixtures/chat_templates/llama3_style.jinja", None,
                     "<|begin_of_text|>", "<|eot_id|>"),
    "mistral_style": ("tests/fixtures/chat_templates/mistral_style.jinja", None, "<s>", "</s>"),
    "kitchen_sink": ("tests/fixtures/chat_templates/kitchen_sink.jinja", None, None, "<|im_end|>"),
}


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker, minus the index tracking: {% generation %} renders its
    body through a caller, like transformers does."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers overrides jinja2's tojson (which HTML-escapes) with plain json.dumps.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_chat(env, source, messages, tools, add_generation_prompt, kwargs, bos, eos):
    """apply_chat_template's context: {**special_tokens_map, **kwargs} on top of the fixed ones."""
    template_kwargs = {}
    if bos is not None:
        template_kwargs["bos_token"] = bos
    if eos is not None:
        template_kwargs["eos_token"] = eos
    template_kwargs.update(kwargs)
    return env.from_string(source).render(messages=messages, tools=tools, documents=None,
                                          add_generation_prompt=add_generation_prompt,
                                          **template_kwargs)


def outcome(fn):
    """{"expected": text}, or the error: raise_exception messages must match exactly, other
    errors (type errors, undefined attributes) only have to be errors."""
    try:
        return {"expected": fn()}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": str(e), "error_kind": "raise_exception"}
        return {"error": str(e), "error_kind": "other"}
    except Exception as e:  # noqa: BLE001 - TypeError etc. inside the template
        return {"error": "%s: %s" % (type(e).__name__, e), "error_kind": "other"}


# ----------------------------------------------------------------------------------------------
# Conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "default": 5, "minimum": 1, "maximum": 50},
                "filters": {
                    "type": "object",
                    "properties": {"site": {"type": "string"}, "fresh": {"type": "boolean"}},
                },
            },
            "required": ["query"],
        },
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression \"safely\" (no eval).",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}, "precision": {"type": "number"}},
            "required": ["expression", "precision"],
        },
    },
}


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **extra):
    message = {"role": "assistant", "content": text}
    message.update(extra)
    return message


def system(text):
    return {"role": "system", "content": text}


def tool_result(text, **extra):
    message = {"role": "tool", "content": text}
    message.update(extra)
    return message


def call(name, arguments, call_id=None):
    c = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        c = {"id": call_id, **c}
    return c


def conversations():
    """(name, messages, tools, extra kwargs); each is rendered with and without a generation
    prompt, and the generation-prompt variants also with enable_thinking false."""
    weather_call = call("get_weather", {"city": "Paris", "unit": "celsius"}, "call_1")
    return [
        ("single_user", [user("Hello!")], None, {}),
        ("system_user", [system("You are a helpful assistant."), user("What is 2+2?")], None, {}),
        ("multi_turn", [system("Be brief."), user("Hi"), assistant("Hello! How can I help?"),
                        user("Tell me a joke.")], None, {}),
        ("multi_turn_no_system", [user("one"), assistant("two"), user("three"), assistant("four")],
         None, {}),
        ("thinking_in_content", [user("Why is the sky blue?"),
                                 assistant("<think>\nRayleigh scattering.\n</think>\n\nBecause of Rayleigh scattering."),
                                 user("And sunsets?")], None, {}),
        ("reasoning_content_last", [user("Solve x+1=3"),
                                    assistant("x = 2", reasoning_content="Subtract 1 from both sides.")],
         None, {}),
        ("reasoning_content_history", [user("Q1"), assistant("A1", reasoning_content="R1"),
                                       user("Q2"), assistant("A2", reasoning_content="\nR2\n\n")],
         None, {}),
        ("reasoning_content_none", [user("Q"), assistant("A", reasoning_content=None), user("Q2")],
         None, {}),
        ("tools_only", [user("What's the weather in Paris?")], [WEATHER_TOOL], {}),
        ("tools_with_system", [system("You are a weather bot."), user("Weather in Oslo?")],
         [WEATHER_TOOL, SEARCH_TOOL, CALC_TOOL], {}),
        ("tool_call_object_args", [user("Weather in Paris?"), assistant("", tool_calls=[weather_call]),
                                   tool_result('{"temperature": 21, "sky": "clear"}', tool_call_id="call_1")],
         [WEATHER_TOOL], {}),
        ("tool_call_string_args", [user("Weather in Paris?"),
                                   assistant("", tool_calls=[call("get_weather", '{"city": "Paris"}')]),
                                   tool_result("21C and sunny")], [WEATHER_TOOL], {}),
        ("tool_call_with_text", [user("Weather?"),
                                 assistant("Let me check that for you.", tool_calls=[weather_call]),
                                 tool_result("sunny"), assistant("It is sunny in Paris.")],
         [WEATHER_TOOL], {}),
        ("parallel_tool_calls", [user("Weather in Paris and Rome?"),
                                 assistant("", tool_calls=[call("get_weather", {"city": "Paris"}),
                                                           call("get_weather", {"city": "Rome"})]),
                                 tool_result("Paris: 20C"), tool_result("Rome: 25C")],
         [WEATHER_TOOL], {}),
        ("multi_step_tools", [system("Use tools."), user("Compute then search."),
                              assistant("", tool_calls=[call("calculate", {"expression": "2**10", "precision": 0})]),
                              tool_result("1024"),
                              assistant("Now searching.", tool_calls=[call("web_search", {"query": "1024", "max_results": 3, "filters": {"site": "example.org", "fresh": True}})]),
                              tool_result("<results>...</results>")],
         [CALC_TOOL, SEARCH_TOOL], {}),
        ("tool_call_flat", [user("Weather?"),
                            assistant("", tool_calls=[{"name": "get_weather", "arguments": {"city": "Lima"}}]),
                            tool_result("warm")], [WEATHER_TOOL], {}),
        ("unicode", [system("Réponds en français 🇫🇷."), user("Qu'est-ce que «naïve» ? 中文 ✓"),
                     assistant("Ça veut dire « naïf » — 天真."), user("Merci ! 😀")], None, {}),
        ("unicode_tool_args", [user("Météo à Zürich ?"),
                               assistant("", tool_calls=[call("get_weather", {"city": "Zürich — ☀", "unit": "celsius"})]),
                               tool_result("Température : 18 °C")], [WEATHER_TOOL], {}),
        ("json_escapes", [user('Quote "this" \\ and\ttab\nnewline'),
                          assistant("", tool_calls=[call("calculate", {"expression": "a\"b\\c\n\t\u0001\u007f", "precision": 1.5})]),
                          tool_result("ok")], [CALC_TOOL], {}),
        ("json_numbers", [user("numbers"),
                          assistant("", tool_calls=[call("calculate", {"expression": "x", "precision": 1e-07, "big": 12345678901234567, "neg": -0.5, "one": 1.0, "exp": 1e22, "flag": False, "nothing": None, "list": [1, 2.5, "three", [], {}]})]),
                          tool_result("done")], [CALC_TOOL], {}),
        ("tool_response_in_user", [user("real question"), assistant("", tool_calls=[weather_call]),
                                   user("<tool_response>\nsunny\n</tool_response>")], [WEATHER_TOOL], {}),
        ("empty_system", [system(""), user("hi")], None, {}),
        ("whitespace_content", [user("\n\n  padded  \n"), assistant("  spaced answer \n\n"), user(" again ")],
         None, {}),
        ("content_none_tool_call", [user("Weather?"), assistant(None, tool_calls=[weather_call]),
                                    tool_result("sunny")], [WEATHER_TOOL], {}),
        ("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Describe "},
                                                       {"type": "image", "image": "cat.png"},
                                                       {"type": "text", "text": " please."}]}],
         None, {}),
        ("content_parts_vision_id", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}},
                                                                 {"type": "video", "video": "b.mp4"},
                                                                 {"type": "text", "text": "Compare."}]}],
         None, {"add_vision_id": True}),
        ("system_not_first", [user("hi"), system("late system"), user("again")], None, {}),
        ("no_user_query", [system("only a system prompt")], None, {}),
        ("empty_messages", [], None, {}),
        ("tool_results_trailing", [user("go"), assistant("", tool_calls=[call("web_search", {"query": "a"}), call("web_search", {"query": "b"})]),
                                   tool_result("A"), tool_result("B")], [SEARCH_TOOL], {}),
        ("long_conversation", [system("S")] + [m for i in range(8) for m in
                                               (user("question %d" % i), assistant("answer %d" % i))] + [user("last")],
         None, {}),
        ("empty_tools_list", [user("no tools here")], [], {}),
        ("unknown_kwargs", [user("hi")], None, {"custom_flag": True, "date_string": "01 Jan 2025"}),
        ("think_tags_unclosed", [user("q"), assistant("<think>partial reasoning without end"), user("q2")],
         None, {}),
        ("assistant_last_with_thinking_content", [user("q"), assistant("<think>\nplan\n</think>\nfinal")],
         None, {}),
    ]


def chat_cases(env, name, source, bos, eos):
    cases = []
    for conv_name, messages, tools, kwargs in conversations():
        variants = [("", False, {}), ("+gen", True, {}), ("+gen+nothink", True, {"enable_thinking": False})]
        if conv_name in ("single_user", "multi_turn", "tools_only"):
            variants.append(("+gen+think", True, {"enable_thinking": True}))
        for suffix, agp, extra in variants:
            all_kwargs = dict(kwargs, **extra)
            case = {"name": conv_name + suffix, "messages": messages, "tools": tools,
                    "add_generation_prompt": agp, "kwargs": all_kwargs}
            case.update(outcome(lambda: render_chat(env, source, messages, tools, agp, all_kwargs, bos, eos)))
            cases.append(case)
    return cases


# ----------------------------------------------------------------------------------------------
# Language-feature cases: (template, context).

EXPRESSIONS = [
    # literals, printing and Python str()
    ("{{ 1 }}|{{ -3 }}|{{ 1.0 }}|{{ 2.50 }}|{{ 1e3 }}|{{ 1_000 }}|{{ 0x1F }}", {}),
    ("{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1.5e-5 }}|{{ 123456789.125 }}|{{ 10 / 4 }}|{{ 10 / 5 }}", {}),
    ("{{ true }}|{{ True }}|{{ none }}|{{ None }}|{{ false }}", {}),
    ("{{ [1, 'a', none, true, 1.5, {'k': (1,)}, ()] }}", {}),
    ("{{ {'a': 1, 'b': [2, 3]} }}|{{ {} }}|{{ [] }}|{{ (1, 2) }}", {}),
    ("{{ \"it's\" }}|{{ ['it\\'s', \"say \\\"x\\\"\", 'back\\\\slash', 'tab\\t', 'nl\\n'] }}", {}),
    ("{{ 'a' 'b' \"c\" }}|{{ '\\x41\\u00e9\\U0001F600\\101\\q\\n' }}", {}),
    ("{{ x }}|{{ x.y }}", {"x": {"y": [1, {"z": None}]}}),
    ("{{ ['é', '中', '😀'] }}|{{ {'ключ': 'значение'} }}", {}),
    # arithmetic
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}", {}),
    ("{{ 7.5 // 2 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ true + 1 }} {{ 3 * 'ab' }} {{ [1] * 3 }}", {}),
    ("{{ 1 + 2 * 3 - 4 / 2 }}|{{ (1 + 2) * 3 }}|{{ -2 ** 2 }}|{{ - 2 | abs }}|{{ 10 - 2 - 3 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ 2.0 ~ undefined_thing ~ [1] }}", {}),
    ("{{ 'ab' + 'cd' }}|{{ [1, 2] + [3] }}|{{ (1,) + (2,) }}", {}),
    # comparisons and logic
    ("{{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' == 'a' }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1.0} }} {{ none == none }}", {}),
    ("{{ 1 < 2 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }} {{ 'b' > 'a' }} {{ 1 != 2 }}", {}),
    ("{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 1 }}|{{ none or none }}|{{ not 0 }}|{{ not [1] }}|{{ [] or {} or 'last' }}", {}),
    ("{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 3 not in [1] }} {{ 'x' in undefined_thing }}", {}),
    ("{{ 'yes' if x else 'no' }}|{{ 'yes' if y else 'no' }}|{{ 'only if' if y }}|{{ a if a is defined else b if b is defined else 'neither' }}", {"x": [0], "y": 0}),
    # tests
    ("{{ x is defined }} {{ x is undefined }} {{ u is defined }} {{ x.missing is defined }} {{ none is none }} {{ x is not none }}", {"x": {}}),
    ("{{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ u is iterable }}", {}),
    ("{{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is sequence }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 'a' is number }}", {}),
    ("{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ true is boolean }} {{ 1 is boolean }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }}", {}),
    ("{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 2 is in [1, 2] }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 'aB' is lower }}", {}),
    ("{{ x is sameas none }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 3 is gt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ range is callable }}", {"x": None}),
    ("{{ enable is false }}|{{ enable is defined and enable is false }}|{{ not enable }}", {"enable": False}),
    # attribute and item access
    ("{{ d.a }}|{{ d['a'] }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d.missing }}|{{ l[0] }}|{{ l[-1] }}|{{ l[10] }}|{{ l.0 }}", {"d": {"a": 1}, "l": [1, 2, 3]}),
    ("{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d | list }}|{{ d['items'] }}", {"d": {"x": 1, "items": 2}}),
    ("{{ s[0] }}{{ s[-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[-3:] }}|{{ s[:-3] }}|{{ s[5:1:-1] }}|{{ s[100:] }}", {"s": "héllo wörld"}),
    ("{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[::-2] }}|{{ l[-2::-1] }}|{{ l[1:2] }}|{{ (1, 2, 3)[1:] }}", {"l": [1, 2, 3, 4, 5]}),
    # string methods
    ("{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|", {"s": "  hELLo wORLD it's  "}),
    ("{{ s.split() }}|{{ s.split(',') }}|{{ s.split(',', 1) }}|{{ s.rsplit(',', 1) }}|{{ '  a  b '.split(none, 1) }}|{{ '  a  b '.rsplit(none, 1) }}", {"s": "a,b,,c"}),
    ("{{ s.startswith('ab') }} {{ s.endswith('yz') }} {{ s.startswith(('x', 'a')) }} {{ s.replace('b', 'B') }} {{ s.replace('', '-') }} {{ s.replace('b', 'B', 1) }}", {"s": "abcabcxyz"}),
    ("{{ s.strip('xy') }}|{{ s.lstrip('x') }}|{{ s.rstrip('y') }}|{{ s.find('b') }}|{{ s.count('x') }}|{{ 'é-b'.find('b') }}", {"s": "xxabyy"}),
    ("{{ '{} and {}'.format(1, 'two') }}|{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{name}!'.format(name='x') }}|{{ '{:>5}|{:<4}|{:^6}|{:.2f}|{:05d}'.format('r', 'l', 'c', 3.14159, 42) }}", {}),
    ("{{ 'a-b'.join(['x', 'y']) }}|{{ ', '.join(l) }}|{{ 'abc'.isalpha() }}{{ '123'.isdigit() }}{{ ' '.isspace() }}|{{ 'ab\\ncd'.splitlines() }}", {"l": ["p", "q"]}),
    ("{{ '%s is %d years, %.2f%%' % ('Bob', 30, 99.5) }}|{{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }}|{{ '%5s|%-5s|%03d' | format('r', 'l', 7) }}", {}),
    # filters
    ("{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello' | length }}|{{ [1, 2] | count }}|{{ {'a': 1} | length }}|{{ u | length }}", {}),
    ("{{ 'hello world' | upper }}|{{ 'HeLLo' | lower }}|{{ 'hello wORLD-foo(bar)' | title }}|{{ 'hELLO' | capitalize }}|{{ 'a b' | replace(' ', '_') }}", {}),
    ("{{ [3, 1, 2] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ l | sort(attribute='n') | map(attribute='id') | list }}", {"l": [{"n": 2, "id": "x"}, {"n": 1, "id": "y"}, {"n": 2, "id": "z"}]}),
    ("{{ [1, 2, 2, 'a', 'A', 1.0] | unique | list }}|{{ [1, 2, 3] | reverse | list }}|{{ 'abc' | reverse }}|{{ [1, 2, 3] | first }}|{{ [1, 2, 3] | last }}|{{ 'xyz' | first }}|{{ [] | first }}", {}),
    ("{{ ['a', 'b'] | join }}|{{ ['a', 'b'] | join(', ') }}|{{ [1, none, true] | join('-') }}|{{ l | join(', ', attribute='n') }}", {"l": [{"n": 1}, {"n": 2}]}),
    ("{{ l | map(attribute='n') | list }}|{{ l | map(attribute='m', default='d') | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ l | selectattr('n') | list | length }}|{{ l | rejectattr('n') | list }}", {"l": [{"n": 1}, {"n": 0}, {"n": 2, "m": 9}]}),
    ("{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|{{ [0, 1, '', 'a'] | select | list }}|{{ l | selectattr('r', 'equalto', 'u') | map(attribute='c') | join }}|{{ [1, 5, 10] | select('gt', 4) | list }}", {"l": [{"r": "u", "c": "a"}, {"r": "s", "c": "b"}, {"r": "u", "c": "c"}]}),
    ("{{ d | dictsort }}|{{ d | dictsort(reverse=true) }}|{{ d | dictsort(by='value') }}|{{ d | items | list }}|{{ u | items | list }}", {"d": {"b": 2, "a": 3, "C": 1}}),
    ("{{ u | default('dflt') }}|{{ none | default('dflt') }}|{{ '' | default('dflt') }}|{{ '' | default('dflt', true) }}|{{ 0 | d('z', true) }}|{{ u | d }}", {}),
    ("{{ '42' | int }} {{ '3.9' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.99 | int }} {{ '0x1A' | int(base=16) }} {{ ' 12 ' | int }} {{ true | int }}", {}),
    ("{{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ '1e3' | float }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 5 | round }} {{ 2.1 | round(method='ceil') }} {{ -2.5 | round(0, 'floor') }}", {}),
    ("{{ 1 | string }}|{{ none | string }}|{{ [1, 'a'] | string }}|{{ u | string }}|{{ -3 | abs }}|{{ -2.5 | abs }}|{{ [1, 2, 3] | sum }}|{{ l | sum(attribute='n') }}|{{ [1, 3, 2] | max }}|{{ ['b', 'A'] | min }}", {"l": [{"n": 1.5}, {"n": 2}]}),
    ("{{ 'abc' | list }}|{{ {'a': 1} | list }}|{{ (1, 2) | list }}|{{ u | list }}|{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}", {}),
    ("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|{{ x | tojson(ensure_ascii=true) }}|{{ x | tojson(separators=(',', ':')) }}", {"x": {"z": [1, 2.0, "é\n\"<>&'"], "a": None, "m": {}, "l": [], "t": True}}),
    ("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width='> ', blank=true) }}|{{ 'x' | center(5) }}|{{ 'one two  three' | wordcount }}", {}),
    ("{{ 'hello world foo bar' | truncate(11) }}|{{ 'hello world foo bar' | truncate(11, true) }}|{{ 'short' | truncate(11) }}|{{ 'abcdefghijklmnopqrst' | truncate(10, true, '..', 0) }}", {}),
    ("{{ '<a href=\"x\">&</a>' | e }}|{{ 'x' | safe }}|{{ 5 | safe }}|{{ [1, 2, 3, 4, 5] | batch(2) | list }}|{{ [1, 2, 3] | batch(2, 0) | list }}|{{ {'k': 'v'} | attr('k') }}", {}),
    # statements
    ("{% for i in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
    ("{% for i in 'abc' %}{{ loop.previtem | default('-') }}{{ i }}{{ loop.nextitem | default('-') }} {% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in [1, 2, 3, 4] if i is even %}{{ i }}/{{ loop.length }} {% else %}none{% endfor %}|{% for i in [1] if false %}x{% else %}filtered{% endfor %}", {}),
    ("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }} {% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for (k, v) in d | dictsort %}{{ k }}{% endfor %}", {"d": {"y": 1, "x": 2}}),
    ("{% for i in range(10) %}{% if i == 5 %}{% break %}{% endif %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for row in [[1, 2], [3]] %}{% for c in row %}{{ loop.index }}.{{ c }}{% endfor %}({{ loop.index }}){% endfor %}|{% for i in [1, 2, 3] %}{{ loop.cycle('x', 'y') }}{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}[{{ x }}]{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("{% for i in [1, 2] %}{% if i == 2 %}[{{ z }}]{% endif %}{% set z = i %}{% endfor %}", {"z": "outer"}),
    ("{% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i * 2] %}{% endfor %}{{ ns.total }} {{ ns.items }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (3, 4) %}{% set c, d = t %}{{ c + d }}|{% set block %}  inner {{ a }} {% endset %}[{{ block }}]|{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }}|{{ greet('Bo', 'Hi') }}|{{ greet('Cy', punct='?') }}|{{ greet() }}", {}),
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}|{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}", {}),
    ("{% macro v(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ v(1, 2, 3, k='w') }}|{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}", {}),
    ("{% set g = 'global' %}{% macro m() %}{{ g }}-{{ later }}{% endmacro %}{% set later = 'set later' %}{{ m() }}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a | default('gone') }}|{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("{% generation %}{% set hidden = 1 %}gen{% endgeneration %}|{{ hidden | default('scoped') }}", {}),
    ("{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}|{{ range(3) | join(',') }}|{% set j = joiner(' + ') %}{% for i in [1, 2, 3] %}{{ j() }}{{ i }}{% endfor %}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}|{{ strftime_now('%d %b %Y') }}", {}),
    # whitespace control (trim_blocks + lstrip_blocks as transformers sets them)
    ("<ul>\n  {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c\n  {{- ' d ' -}}  e\n{# comment #}\n  {#- c2 -#}  f {{ 'g' }}  \n", {}),
    ("x\n    {%+ if true %}kept indent{% endif %}\n  {% if true +%}\nno trim\n{% endif %}\ny", {}),
    ("{% if true %}\n\n  line\n{% endif %}\n\n{{ 1 }}\n{{ 2 }}\n\n", {}),
    ("  {% raw %}  {{ raw }}  {% endraw %}  \n{%- raw -%}   trimmed   {%- endraw %}\nend", {}),
    ("line1\r\nline2\r{{ 'x' }}\r\n{% if true %}\r\nwin\r\n{% endif %}\r\n", {}),
    ("{{ {'a': {'b': 1}} }}|{{ {'a': {'b': {'c': 2}}}['a'] }}", {}),
    ("{%- set content = message.content.split('</think>')[-1].lstrip('\\n') -%}{{ content }}|{{ message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"message": {"content": "<think>\nreason\n</think>\n\nanswer"}}),
    ("{{ messages[::-1] | map(attribute='role') | join(',') }}|{% for m in messages[::-1] %}{{ (messages | length - 1) - loop.index0 }}{% endfor %}", {"messages": [{"role": "a"}, {"role": "b"}, {"role": "c"}]}),
    # precedence and odds and ends seen in real templates
    ("{{ not 1 == 2 }} {{ not 'a' in 'abc' }} {{ x | upper if x else 'n' }} {{ 1 + 2 | string }} {{ -1 | abs + 1 }} {{ 'a' if none is none }}", {"x": "lo"}),
    ("{{ 4 // 2 }} {{ 4.0 // 2 }} {{ '%d|%i|%s|%r' % (3.7, true, 2.0, 'q') }} {{ '%x %o %e %g %c' % (255, 8, 12345.678, 0.0001, 65) }} {{ 10 | string + 'a' }}", {}),
    ("{% if a == 1 %}one{% elif a == 2 %}two{% elif a == 3 %}three{% else %}many{% endif %}|{{ [1, 2,] }}|{{ {'a': 1,} }}|{{ (1,) }}|{{ () }}", {"a": 3}),
    ("{% for x in xs | sort(attribute='a') if x.a > 0 %}{{ loop.index }}/{{ loop.length }}:{{ x.a }} {% endfor %}", {"xs": [{"a": 3}, {"a": -1}, {"a": 1}, {"a": 2}]}),
    ("{{ ['ab', 'cb'] | map('replace', 'b', 'x') | list }}|{{ [[1, 2], [3]] | map('length') | list }}|{{ [1.5, 2.25] | map('round', 1) | list }}|{{ [' a ', 'b '] | map('trim') | join('.') }}", {}),
    ("{{ 'é' < 'z' }} {{ 'Z' < 'a' }} {{ 'ä' > 'a' }} {{ ['b'] > ['a', 'z'] }} {{ 'abc' | max }} {{ [3.5, 2] | min }}", {}),
    ("{{ x | tojson }}|{{ (1, [2, (3,)]) | tojson }}|{{ {'b': {'d': 1, 'c': 2}, 'a': 0} | tojson(sort_keys=true, indent=1) }}|{{ 'x' | tojson }}|{{ 1.5e300 * 1e10 | tojson }}", {"x": [1, "two", None]}),
    ("{{ '{{' }} {{ '}}' }} {{ {'a': '}}'} }} {% set x = '%}' %}{{ x }} a { b } {x {% if true %}%{% endif %}", {}),
    ("  {# lstripped comment #}\nafter\n{# inline #} x\n  {#- stripped -#}  y", {}),
    ("{% for i in [1, 2] -%}\n  [{{ i }}]\n{%- endfor %}\n{{- '|' }}\n{%+ if true -%} in {%- endif +%}\nout", {}),
    ("\n", {}),
    ("{{ x }}\n\n", {"x": "only one trailing newline is removed"}),
    ("{% macro json_type(t) -%}{%- if t == 'string' -%}str{%- elif t == 'array' -%}list[{{ json_type('string') }}]{%- else -%}Any{%- endif -%}{%- endmacro %}{% for k, v in props.items() %}{{ k }}: {{ json_type(v.type) }}{{ ', ' if not loop.last }}{% endfor %}", {"props": {"q": {"type": "string"}, "l": {"type": "array"}, "o": {"type": "object"}}}),
    ("{% set ns = namespace(is_first=false, sp='') %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.sp = ns.sp + m.content %}{% endif %}{% endfor %}{{ ns.sp }}|{{ messages | selectattr('role', 'in', ['user', 'system']) | map(attribute='content') | join('+') }}", {"messages": [{"role": "system", "content": "A"}, {"role": "user", "content": "B"}, {"role": "system", "content": "C"}]}),
    ("{{ messages | map(attribute='content') | map('lower') | select('string') | list }}|{{ messages | rejectattr('role', 'eq', 'user') | list | length }}|{{ messages | groupby_missing | default(1) if false else 'ok' }}", {"messages": [{"role": "user", "content": "X"}, {"role": "bot", "content": "Y"}]}),
    # patterns from real chat templates, and Unicode case mapping
    ("{{ messages[0]['content'] | trim if messages[0]['role'] == 'system' else 'x' }}", {"messages": [{"role": "system", "content": " s "}]}),
    ("{%- for m in messages -%}{{- m.role -}}{%- if not loop.last -%},{%- endif -%}{%- endfor -%}", {"messages": [{"role": "a"}, {"role": "b"}]}),
    ("{{ (messages | selectattr('role', 'equalto', 'system') | list | first).content | default('none') }}", {"messages": [{"role": "user"}]}),
    ("{{ tools | map(attribute='function.name') | join(', ') }}", {"tools": [{"function": {"name": "a"}}, {"function": {"name": "b"}}]}),
    ("{% for t in tools %}{{ t.function.parameters.properties | tojson(indent=4) }}{% endfor %}", {"tools": [{"function": {"parameters": {"properties": {"x": {"type": "int"}, "y": []}}}}]}),
    ("{{ x | tojson(indent='\\t') }}|{{ x | tojson(indent=0) }}|{{ x | tojson(4) }}", {"x": {"a": [1, "é"]}}),
    ("{{ '%.3f' | format(1/3) }} {{ '%-6.2f|' | format(2.5) }} {{ '%+d' | format(5) }} {{ '%5.1f%%' % 12.345 }} {{ '{:,}'.format(1234567) }}", {}),
    ("{{ 1e-7 }} {{ 123456789012345678 }} {{ 1.0e15 }} {{ 1.23e15 }} {{ -0.0 }} {{ 0.000123 }} {{ 3.0 * 1.1 }} {{ x }}", {"x": 1.7976931348623157e308}),
    ("{{ x | round(3) }} {{ x | round(1, 'ceil') }} {{ (x * 100) | int }}", {"x": 2.34567}),
    ("{{ d | dictsort | map('last') | list }}|{{ d | dictsort | map('first') | join }}|{% for k, v in d | dictsort(false, 'value', true) %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2, "c": 0}}),
    ("{{ s | truncate(5) }}|{{ s | wordcount }}|{{ s | center(20) }}|", {"s": "The quick brown fox"}),
    ("{% for i in range(3) %}{% set outer = loop %}{% for j in range(2) %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("{% macro f() %}  a  \n  b  {% endmacro %}[{{ f() }}][{{ f() | trim }}]|{%- macro g() -%}\n  a\n{%- endmacro -%}\n[{{ g() }}]", {}),
    ("{{ x | selectattr('a', 'defined') | list | length }}{{ x | rejectattr('a', 'none') | list | length }}{{ x | selectattr('a', 'gt', 0) | list | length }}", {"x": [{"a": 1}, {"b": 2}, {"a": None}]}),
    ("{{ x | unique(attribute='r') | map(attribute='i') | list }}|{{ x | max(attribute='i') }}|{{ x | sum(attribute='i', start=10) }}", {"x": [{"r": "a", "i": 1}, {"r": "A", "i": 2}, {"r": "b", "i": 3}]}),
    ("{% for a in x %}{{ a }}{% else %}E{% endfor %}|{{ (x or {}).get('a', 'def') }}", {"x": None}),
    ("{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'tool' %}{% set ns.found = true %}{% break %}{% endif %}{% endfor %}{{ ns.found }}", {"messages": [{"role": "u"}, {"role": "tool"}]}),
    ("{{ 'hello {name}, you are {age}'.format(name='Bob', age=3) }} {{ '{!r}'.format('a') }} {{ '{0!s:>4}'.format(1) }}", {}),
    ("{{ 'É' | lower }} {{ 'straße' | upper }} {{ 'ÉCOLE élève' | title }} {{ 'ωμέγα' | upper }} {{ 'Привет' | lower }} {{ 'é' is lower }} {{ 'É'.isupper() }}", {}),
    ("{{ x | truncate(3) }}|{{ u | truncate }}|{{ false | select | list }}|{{ 0 | map('string') | list }}|{{ [] | last }}", {"x": [1, 2]}),
    ("{{ 3.5 is divisibleby 0.5 }} {{ 4.0 is even }} {{ 3.5 is odd }} {{ -3 is odd }}", {}),
    # errors: raise_exception messages must match exactly, the others just be errors
    ("{{ raise_exception('Custom failure: ' ~ 42) }}", {}),
    ("{% if x %}{{ raise_exception('x was set') }}{% endif %}ok", {"x": 1}),
    ("{{ u.attr }}", {}),
    ("{{ d.missing.deeper }}", {"d": {}}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{{ none.attr.x }}", {}),
    ("{{ [1].append(2) }}", {}),
    ("{{ range(100001) | length }}", {}),
    ("{{ x | tojson }}", {}),
    ("{{ undefined_fn() }}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{% set x = 1 %}{% set x.attr = 2 %}", {}),
    ("{{ 5 is divisibleby 0 }}", {}),
    ("{{ 'abc' | int + none }}", {}),
]


def expression_cases(env):
    cases = []
    for template, context in EXPRESSIONS:
        case = {"template": template, "context": context}
        case.update(outcome(lambda: env.from_string(template).render(**context)))
        cases.append(case)
    return cases


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_template(source, key):
    with open(os.path.join(REPO, source), encoding="utf-8") as f:
        text = f.read()
    return json.loads(text)[key] if key else text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"),
                        help="fixtures root (chat_templates/ and jinja/ are written below it)")
    args = parser.parse_args()
    env = make_environment(FIXED_NOW)
    manifest = {"jinja2_version": jinja2.__version__,
                "fixed_now": FIXED_NOW.isoformat(), "templates": {}}
    for name, (source, key, bos, eos) in TEMPLATES.items():
        template = load_template(source, key)
        cases = chat_cases(env, name, template, bos, eos)
        write_jsonl(os.path.join(args.out, "chat_templates", name, "cases.jsonl"), cases)
        manifest["templates"][name] = {"source": source, "key": key, "bos_token": bos,
                                       "eos_token": eos, "num_cases": len(cases)}
        num_errors = sum(1 for c in cases if "error" in c)
        print("%-14s %3d cases (%d errors)" % (name, len(cases), num_errors), file=sys.stderr)
    with open(os.path.join(args.out, "chat_templates", "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=2)
        f.write("\n")
    expressions = expression_cases(env)
    write_jsonl(os.path.join(args.out, "jinja", "expressions.jsonl"), expressions)
    print("expressions    %3d cases (%d errors)" % (len(expressions), sum(1 for c in expressions if "error" in c)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
