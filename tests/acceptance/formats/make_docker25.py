# Writes the archive `docker save` of Docker 25 and later writes: an OCI
# layout (oci-layout, index.json, blobs/sha256/) plus a manifest.json whose
# Config and Layers name blobs/sha256/<hex> paths. python3 make_docker25.py LAYOUT OUT
import json, os, sys, tarfile
lay, out = sys.argv[1:3]
idx = json.load(open(f"{lay}/index.json"))
mdig = idx["manifests"][0]["digest"].split(":")[1]
man = json.load(open(f"{lay}/blobs/sha256/{mdig}"))
path = lambda d: "blobs/sha256/" + d.split(":")[1]
dman = [{"Config": path(man["config"]["digest"]), "RepoTags": ["fmt/d25:v1"],
         "Layers": [path(l["digest"]) for l in man["layers"]]}]
open(f"{lay}/manifest.json", "w").write(json.dumps(dman))
with tarfile.open(out, "w") as t:
    for name in ["blobs", "oci-layout", "index.json", "manifest.json"]:
        t.add(f"{lay}/{name}", arcname=name)
os.unlink(f"{lay}/manifest.json")
