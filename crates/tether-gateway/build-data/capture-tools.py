#!/usr/bin/env python3
"""Captures real MCP servers' tools/list answers for the tool-search labelled set
(tests/data/tool-search/real-tools.json).

Run it in a scratch directory where the servers are installed (npm and a venv):
    npm install @modelcontextprotocol/server-filesystem ... @playwright/mcp ...   (see SERVERS)
    python3 -m venv venv && venv/bin/pip install mcp-server-git mcp-server-fetch mcp-server-time
    python3 capture-tools.py [SERVER...]      # writes out/SERVER.json
Each server is started over stdio with placeholder credentials (none is contacted: tools/list
needs no account), sent initialize, notifications/initialized and tools/list, then killed.
real-tools.json was assembled from out/*.json with each package's name and version (redis and
sqlite did not answer initialize without their service, so they are not in the set).
"""
import json, subprocess, sys, os, select, time
os.makedirs("out", exist_ok=True)
SERVERS = servers = {
 "filesystem": (["node","node_modules/@modelcontextprotocol/server-filesystem/dist/index.js","/tmp"], {}),
 "memory": (["node","node_modules/@modelcontextprotocol/server-memory/dist/index.js"], {}),
 "github": (["node","node_modules/@modelcontextprotocol/server-github/dist/index.js"], {"GITHUB_PERSONAL_ACCESS_TOKEN":"x"}),
 "puppeteer": (["node","node_modules/@modelcontextprotocol/server-puppeteer/dist/index.js"], {}),
 "slack": (["node","node_modules/@modelcontextprotocol/server-slack/dist/index.js"], {"SLACK_BOT_TOKEN":"x","SLACK_TEAM_ID":"x"}),
 "postgres": (["node","node_modules/@modelcontextprotocol/server-postgres/dist/index.js","postgresql://localhost:1/x"], {}),
 "brave-search": (["node","node_modules/@modelcontextprotocol/server-brave-search/dist/index.js"], {"BRAVE_API_KEY":"x"}),
 "sequential-thinking": (["node","node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"], {}),
 "gitlab": (["node","node_modules/@modelcontextprotocol/server-gitlab/dist/index.js"], {"GITLAB_PERSONAL_ACCESS_TOKEN":"x"}),
 "google-maps": (["node","node_modules/@modelcontextprotocol/server-google-maps/dist/index.js"], {"GOOGLE_MAPS_API_KEY":"x"}),
 "redis": (["node","node_modules/@modelcontextprotocol/server-redis/dist/index.js","redis://localhost:1"], {}),
 "everything": (["node","node_modules/@modelcontextprotocol/server-everything/dist/index.js"], {}),
 "git": (["venv/bin/mcp-server-git"], {}),
 "fetch": (["venv/bin/mcp-server-fetch"], {}),
 "time": (["venv/bin/mcp-server-time"], {}),
 "sqlite": (["venv/bin/mcp-server-sqlite","--db-path","x.db"], {}),
 "playwright": (["node","node_modules/@playwright/mcp/cli.js"], {}),
 "notion": (["node","node_modules/@notionhq/notion-mcp-server/bin/cli.mjs"], {"NOTION_TOKEN":"x"}),
 "context7": (["node","node_modules/@upstash/context7-mcp/dist/index.js"], {}),
 "aws-kb-retrieval": (["node","node_modules/@modelcontextprotocol/server-aws-kb-retrieval/dist/index.js"], {"AWS_ACCESS_KEY_ID":"x","AWS_SECRET_ACCESS_KEY":"x","AWS_REGION":"us-east-1"}),
 "everart": (["node","node_modules/@modelcontextprotocol/server-everart/dist/index.js"], {"EVERART_API_KEY":"x"}),
}
def rpc(p, msg):
    p.stdin.write((json.dumps(msg)+"\n").encode()); p.stdin.flush()
def read(p, want_id, deadline):
    buf=b""
    while time.time()<deadline:
        r,_,_=select.select([p.stdout],[],[],0.5)
        if not r: continue
        line=p.stdout.readline()
        if not line: return None
        try: m=json.loads(line)
        except Exception: continue
        if m.get("id")==want_id: return m
    return None
for name,(cmd,env) in servers.items():
    if len(sys.argv)>1 and name not in sys.argv[1:]: continue
    e=dict(os.environ); e.update(env)
    try:
        p=subprocess.Popen(cmd,stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,env=e,cwd=os.getcwd())
    except Exception as ex:
        print("FAIL",name,ex); continue
    rpc(p,{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"capture","version":"1"}}})
    init=read(p,1,time.time()+40)
    if not init: print("FAIL init",name); p.kill(); continue
    rpc(p,{"jsonrpc":"2.0","method":"notifications/initialized"})
    rpc(p,{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}})
    tl=read(p,2,time.time()+40)
    p.kill()
    if not tl or "result" not in tl: print("FAIL list",name,tl); continue
    info=init["result"].get("serverInfo",{})
    json.dump({"server":name,"serverInfo":info,"tools":tl["result"]["tools"]},open(f"out/{name}.json","w"),indent=1)
    print("ok",name,info,len(tl["result"]["tools"]))
