import asyncio, sys, time
PORT = int(sys.argv[1]); PID = int(sys.argv[2]); CONNS = 60
ANN = (64 << 20) - 1024; SENT = 60 << 20
def rss():
    for l in open(f"/proc/{PID}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) // 1024
async def one(i, held):
    r, w = await asyncio.open_connection("127.0.0.1", PORT)
    w.write(f"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${ANN}\r\n".encode())
    chunk = b"x" * (1 << 20); sent = 0
    try:
        while sent < SENT:
            w.write(chunk); await w.drain(); sent += len(chunk)
    except Exception:
        pass
    try:
        ans = await asyncio.wait_for(r.read(200), 0.5)
    except Exception:
        ans = b""
    held.append(w)
    return sent, ans
async def main():
    before = rss(); held = []
    res = await asyncio.gather(*(one(i, held) for i in range(CONNS)))
    await asyncio.sleep(1)
    after = rss()
    refused = sum(1 for _, a in res if b"budget" in a)
    print(f"RSS before {before} MiB, after {after} MiB; sent {sum(s for s,_ in res) >> 20} MiB by {CONNS} Redis connections; {refused} refused")
asyncio.run(main())
