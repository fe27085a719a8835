"""Every metric the alerting rules and the Grafana dashboard name is in a
scrape of a running changegate, and every dashboard query parses.

Usage: metric_names.py RULES DASHBOARD SCRAPE QUERIES_OUT

Metric names are read from each PromQL expression (the rules' `expr`, the
panels' target `expr`, the `label_values(METRIC, label)` of the template
variables): label matchers, grouping label lists, range and subquery
brackets and string literals are removed, and what is left that is an
identifier not followed by `(` and not a PromQL keyword is a metric name. A
histogram's `_bucket`, `_sum` and `_count` series count as the histogram.
QUERIES_OUT receives the dashboard's queries as recording rules (Grafana's
variables given plain values) for `promtool check rules` to parse.
"""

import json
import re
import sys

import yaml

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring",
            "group_left", "group_right", "bool", "offset", "inf", "nan"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names one PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "''", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in IDENTIFIER.finditer(text):
        before = text[match.start() - 1] if match.start() > 0 else " "
        after = text[match.end():].lstrip()[:1]
        word = match.group()
        # Part of a number or duration (`1e3`, `10m`), a function, a keyword.
        if before.isalnum() or before in "._$" or after == "(" or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def rule_exprs(path: str) -> list[str]:
    with open(path) as f:
        rules = yaml.safe_load(f)
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def panels_of(panels: list) -> list:
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(panels_of(panel.get("panels", [])))
    return found


def dashboard_exprs(path: str) -> tuple[list[str], set[str]]:
    """The panels' queries, and the metrics the template variables read."""
    with open(path) as f:
        dashboard = json.load(f)
    exprs = [target["expr"]
             for panel in panels_of(dashboard["panels"])
             for target in panel.get("targets", [])
             if "expr" in target]
    variables = set()
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        query = query.get("query", "") if isinstance(query, dict) else query
        found = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*\w+\s*\)\s*", query)
        if not found:
            sys.exit(f"error: template variable {variable['name']}: not a label_values(METRIC, label) query: {query}")
        variables.add(found.group(1))
    return exprs, variables


def scraped(path: str) -> tuple[set[str], set[str]]:
    """Metric families with samples in the scrape, and which are histograms."""
    families, histograms = set(), set()
    with open(path) as f:
        for line in f:
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()[:4]
                if kind == "histogram":
                    histograms.add(name)
            elif line.strip() and not line.startswith("#"):
                families.add(IDENTIFIER.match(line).group())
    return families, histograms


def exported(name: str, families: set[str], histograms: set[str]) -> bool:
    if name in families:
        return True
    return any(name.endswith(suffix) and name[: -len(suffix)] in histograms
               for suffix in HISTOGRAM_SUFFIXES)


def as_recording_rules(exprs: list[str]) -> dict:
    plain = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
    rules = []
    for n, expr in enumerate(exprs):
        for variable, value in plain.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{n}", "expr": expr.replace("$job", ".*")})
    return {"groups": [{"name": "dashboard", "rules": rules}]}


def main(rules_path: str, dashboard_path: str, scrape_path: str, queries_out: str) -> None:
    families, histograms = scraped(scrape_path)
    panel_exprs, variable_metrics = dashboard_exprs(dashboard_path)
    wanted = {}
    for source, exprs in ((rules_path, rule_exprs(rules_path)), (dashboard_path, panel_exprs)):
        for expr in exprs:
            for name in metric_names(expr):
                wanted.setdefault(name, set()).add(source)
    for name in variable_metrics:
        wanted.setdefault(name, set()).add(dashboard_path)
    missing = sorted(name for name in wanted if not exported(name, families, histograms))
    for name in missing:
        print(f"error: {name} (named in {', '.join(sorted(wanted[name]))}) is not in the scrape", file=sys.stderr)
    with open(queries_out, "w") as f:
        yaml.safe_dump(as_recording_rules(panel_exprs), f, sort_keys=False, width=1000)
    if missing:
        sys.exit(1)
    print(f"metric names: {len(wanted)} named by the rules and the dashboard, all in the scrape")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
