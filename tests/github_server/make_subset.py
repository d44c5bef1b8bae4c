"""Extract a subset of GitHub's REST OpenAPI description (from the npm package
@octokit/openapi, file generated/api.github.com.json) with the transitive
closure of all $ref'd components.  Usage: python make_subset.py SRC DST

A copy of the shared make_subset.py with the operations `graphmend apply` needs added to WANT."""
import json, sys
SRC, DST = sys.argv[1], sys.argv[2]
WANT = {  # operationId -> why
    "pulls/get": "requested", "pulls/list-files": "requested",
    "pulls/create-review": "requested", "pulls/list-review-comments": "requested",
    "issues/create-comment": "requested", "issues/update-comment": "requested",
    "issues/list-comments": "requested", "checks/create": "requested",
    "checks/update": "requested", "repos/create-commit-status": "requested",
    "git/create-ref": "requested", "repos/get-content": "requested",
    "repos/create-or-update-file-contents": "requested", "pulls/create": "requested",
    "repos/get": "requested",
    # extras useful for a sticky review / de-dup strategy
    "pulls/list-reviews": "extra", "pulls/update-review": "extra",
    "pulls/create-review-comment": "extra",
    # extras for a one-commit multi-file scheduled-scan branch (Git Data API)
    "git/get-ref": "extra", "git/update-ref": "extra", "git/create-blob": "extra",
    "git/create-tree": "extra", "git/create-commit": "extra",
    # further operations a review bot and a scan bot are likely to need
    "pulls/list": "extra", "pulls/update": "extra", "pulls/delete-pending-review": "extra",
    "pulls/update-review-comment": "extra", "pulls/delete-review-comment": "extra",
    "issues/delete-comment": "extra", "issues/create": "extra", "issues/update": "extra",
    "repos/get-commit": "extra", "repos/compare-commits": "extra",
    "repos/list-commit-statuses-for-ref": "extra", "checks/list-for-ref": "extra",
    "checks/get": "extra", "code-scanning/upload-sarif": "extra", "git/get-commit": "extra",
    "git/get-tree": "extra", "repos/get-branch": "extra",
    # GitHub App installation auth
    "apps/get-repo-installation": "extra", "apps/create-installation-access-token": "extra",
    "pulls/list-commits": "extra", "pulls/get-review": "extra", "pulls/list-comments-for-review": "extra",
    # `graphmend apply` (/graphmend apply on a pull request): who may ask, and the answer
    "repos/get-collaborator-permission-level": "apply", "reactions/create-for-issue-comment": "apply",
    "issues/get-comment": "apply",
}
spec = json.load(open(SRC))
out_paths = {}
for path, item in spec["paths"].items():
    keep = {}
    for k, v in item.items():
        if isinstance(v, dict) and v.get("operationId") in WANT:
            keep[k] = v
    if keep:
        if "parameters" in item:
            keep["parameters"] = item["parameters"]
        out_paths[path] = keep
found = {v["operationId"] for it in out_paths.values() for v in it.values() if isinstance(v, dict) and "operationId" in v}
missing = set(WANT) - found
assert not missing, missing
comps = {}
def walk(node):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/"):
            _, _, kind, name = ref.split("/", 3)
            if name not in comps.setdefault(kind, {}):
                comps[kind][name] = spec["components"][kind][name]
                walk(comps[kind][name])
        for v in node.values():
            walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(out_paths)
sub = {"openapi": spec["openapi"], "info": dict(spec["info"], description=spec["info"].get("description", "") + " (subset)"),
       "servers": spec.get("servers", []), "paths": out_paths, "components": comps}
json.dump(sub, open(DST, "w"), indent=1, sort_keys=True)
print("ops:", len(found), "paths:", len(out_paths), {k: len(v) for k, v in comps.items()})
