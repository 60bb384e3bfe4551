import hashlib, io, json, os, sys, tarfile
out = sys.argv[1]; bb = sys.argv[2]
os.makedirs(out + "/blobs/sha256", exist_ok=True)
def blob(b):
    d = hashlib.sha256(b).hexdigest()
    open(f"{out}/blobs/sha256/{d}", "wb").write(b)
    return "sha256:" + d, len(b)
def tar(entries):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, data in entries:
            ti = tarfile.TarInfo(name); ti.mtime = 1700000000
            if kind == "dir": ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
            elif kind == "link": ti.type = tarfile.SYMTYPE; ti.linkname = data; t.addfile(ti)
            else: ti.mode = 0o755 if kind == "exe" else 0o644; ti.size = len(data); t.addfile(ti, io.BytesIO(data))
    return bio.getvalue()
busy = open(bb, "rb").read()
l1 = tar([("bin", "dir", None), ("bin/busybox", "exe", busy), ("bin/sh", "link", "busybox"),
          ("bin/cat", "link", "busybox"), ("bin/test", "link", "busybox"), ("etc", "dir", None),
          ("etc/gone", "file", b"deleted by layer 2\n"), ("etc/base", "file", b"base\n"),
          ("tmp", "dir", None)])
l2 = tar([("etc", "dir", None), ("etc/.wh.gone", "file", b""), ("etc/layer2", "file", b"from layer 2\n")])
d1, s1 = blob(l1); d2, s2 = blob(l2)
cfg = json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Env": ["PATH=/bin", "FMT=yes"], "WorkingDir": "/tmp", "Cmd": ["/bin/sh"]},
    "rootfs": {"type": "layers", "diff_ids": [d1, d2]}}).encode()
dc, sc = blob(cfg)
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": dc, "size": sc},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d1, "size": s1},
               {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d2, "size": s2}]}).encode()
dm, sm = blob(man)
open(out + "/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
open(out + "/index.json", "w").write(json.dumps({"schemaVersion": 2, "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": dm, "size": sm,
     "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}))
