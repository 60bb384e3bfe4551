#!/usr/bin/env python3
"""Builds OCI image layouts for the registry tests and the pull benchmark.

  make_oci.py OUT TAG BASE.tar [--marker TEXT] [--arm64-marker TEXT] [--filler MB...]

OUT gets an OCI layout (oci-layout, index.json, blobs/sha256) tagged TAG:
  layer 1: BASE.tar (a root tree: scripts/make-test-rootfs.sh), gzip
  layer 2: /etc/pulled = TEXT and a whiteout of /etc/image-name, gzip
  layer 3: /opt/third (an opaque dir /opt/op with one file), uncompressed
  --filler MB[:SEED]: one more gzip layer per value, MB of random bytes in
                     /filler/N (the same SEED gives the same bytes, so two
                     images can share a layer)
  --plain: only BASE.tar and the filler layers (no marker/third layers)
With --arm64-marker, TAG names an index of two manifests, linux/amd64 and
linux/arm64 (the arm64 one's /etc/pulled says the other text).
"""
import argparse, gzip, hashlib, io, json, os, random, tarfile, time


def put(out, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + d, "size": len(data)}


def tar_of(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, kind in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                t.addfile(ti)
            else:
                ti.size = len(data)
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def filler(spec, i):
    mb, _, seed = spec.partition(":")
    data = random.Random(seed).randbytes(int(mb) << 20) if seed else os.urandom(int(mb) << 20)
    return tar_of([("filler", b"", "dir"), ("filler/%s" % (seed or i), data, "file")])


def image(out, base, marker, arch, fillers, plain=False):
    layers, diffs = [], []
    raw = [open(base, "rb").read()]
    if not plain:
        raw.append(tar_of([("etc", b"", "dir"), ("etc/pulled", marker.encode() + b"\n", "file"),
                           ("etc/.wh.image-name", b"", "file")]))
        raw.append(tar_of([("opt", b"", "dir"), ("opt/third", b"third\n", "file"),
                           ("opt/op", b"", "dir"), ("opt/op/.wh..wh..opq", b"", "file"),
                           ("opt/op/kept", b"kept\n", "file")]))
    for i, spec in enumerate(fillers):
        raw.append(filler(spec, i))
    for i, r in enumerate(raw):
        diffs.append("sha256:" + hashlib.sha256(r).hexdigest())
        if i == 2 and not plain:
            d = put(out, r)
            d["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
        else:
            d = put(out, gzip.compress(r, compresslevel=1, mtime=0))
            d["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
        layers.append(d)
    config = {"architecture": arch, "os": "linux",
              "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PULLED=1"],
                         "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": diffs},
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1700000000))}
    c = put(out, json.dumps(config).encode())
    c["mediaType"] = "application/vnd.oci.image.config.v1+json"
    m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
         "config": c, "layers": layers}
    md = put(out, json.dumps(m).encode())
    md["mediaType"] = m["mediaType"]
    return md


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("tag")
    ap.add_argument("base")
    ap.add_argument("--marker", default="pulled")
    ap.add_argument("--arm64-marker")
    ap.add_argument("--filler", action="append", default=[])
    ap.add_argument("--plain", action="store_true")
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(a.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    top = image(a.out, a.base, a.marker, "amd64", a.filler, a.plain)
    if a.arm64_marker:
        amd = dict(top, platform={"os": "linux", "architecture": "amd64"})
        arm = image(a.out, a.base, a.arm64_marker, "arm64", a.filler)
        arm["platform"] = {"os": "linux", "architecture": "arm64", "variant": "v8"}
        idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
               "manifests": [amd, arm]}
        top = put(a.out, json.dumps(idx).encode())
        top["mediaType"] = idx["mediaType"]
    ipath = os.path.join(a.out, "index.json")
    index = json.load(open(ipath)) if os.path.exists(ipath) else {"schemaVersion": 2, "manifests": []}
    index["manifests"] = [m for m in index["manifests"]
                          if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != a.tag]
    top["annotations"] = {"org.opencontainers.image.ref.name": a.tag}
    index["manifests"].append(top)
    with open(ipath, "w") as f:
        json.dump(index, f)
    print(top["digest"])


main()
