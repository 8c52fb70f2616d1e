"""MkDocs hook (mkdocs.yml `hooks:`): the docs' references rendered from the published schemas.

api/openapi.json and api/manifest.schema.json are added to the site beside the reference pages
(reference/openapi.json, reference/manifest.schema.json), so the pages link them and the links
are checked by `mkdocs build --strict`; the marker `<!-- openapi:operations -->` in a page is
replaced by a table of every operation in the OpenAPI document (method, path, listener, summary,
statuses), so docs/reference/http-api.md cannot list a route the schema does not.
"""

import json
import os

from mkdocs.structure.files import File

API = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = {"reference/openapi.json": "openapi.json",
           "reference/manifest.schema.json": "manifest.schema.json"}
MARKER = "<!-- openapi:operations -->"
LISTENER = {"control": "control", "fleet": "both", "fleet-public": "public", "invoke": "public",
            "inference": "public", "health": "public"}


def on_files(files, config):
    for uri, name in SCHEMAS.items():
        files.append(File.generated(config, uri, abs_src_path=os.path.join(API, name)))
    return files


def operations_table():
    with open(os.path.join(API, "openapi.json")) as f:
        doc = json.load(f)
    rows = ["| method | path | listener | what | statuses |", "|---|---|---|---|---|"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            tags = op.get("tags", [])
            where = ("both" if "fleet" in tags or ("control" in tags and "health" in tags)
                     else LISTENER.get(tags[0], "?") if tags else "?")
            auth = "" if op.get("security") == [] else " (token)"
            if {} in op.get("security", []):
                auth = " (token if the function asks)"
            statuses = ", ".join(op["responses"])
            rows.append(f"| `{method.upper()}` | `{path}` | {where} | {op['summary']}{auth} | "
                        f"{statuses} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, operations_table())
    return markdown
