# Rewrites an image archive (a tar) into a hostile one, for
# tests/acceptance/test_image_formats.sh: python3 tamper.py MODE IN OUT.
#   dotdot    docker save: manifest.json names a layer "../<layer>"
#   missing   docker save: manifest.json names a layer the archive lacks
#   badlayer  docker save: a layer's bytes changed (its config's diff_id no longer matches)
#   badblob   oci-archive: a blob's bytes no longer hash to its name
#   two       oci-archive: index.json lists the image twice, tagged v1 and v2
import io, json, sys, tarfile
mode, src, dst = sys.argv[1:4]
tin = tarfile.open(src)
members = [(m, tin.extractfile(m).read() if m.isfile() else None) for m in tin.getmembers()]
out = tarfile.open(dst, "w")
for m, data in members:
    if m.name == "manifest.json" and mode in ("dotdot", "missing"):
        man = json.loads(data)
        layers = man[0]["Layers"]
        layers[0] = "../" + layers[0] if mode == "dotdot" else "0" * 64 + ".tar"
        data = json.dumps(man).encode()
    elif mode == "badlayer" and m.isfile() and m.name.endswith(".tar") and m.size < 100000:
        data = data[:-1024] + b"\1" + data[-1023:]
    elif mode == "badblob" and m.isfile() and m.name.startswith("blobs/") and m.size > 100000:
        data = bytes([data[0] ^ 1]) + data[1:]
    elif mode == "two" and m.name == "index.json":
        idx = json.loads(data)
        second = json.loads(json.dumps(idx["manifests"][0]))
        second.setdefault("annotations", {})["org.opencontainers.image.ref.name"] = "v2"
        idx["manifests"].append(second)
        data = json.dumps(idx).encode()
    if data is not None:
        m.size = len(data)
        out.addfile(m, io.BytesIO(data))
    else:
        out.addfile(m)
out.close()
