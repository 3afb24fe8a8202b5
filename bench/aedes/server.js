// aedes on a plain TCP listener, for the side-by-side benchmarks (bench/brokers.py, kind "aedes").
// Usage: node server.js PORT [HOST]. In-memory state only (aedes' default persistence), no logging.
// Exits on SIGTERM/SIGINT after closing the listener and the broker.
'use strict'

const net = require('net')
const { createBroker } = requireAedes()

function requireAedes () {
  const aedes = require('aedes')
  // aedes 0.51 exports a factory function; newer majors export createBroker
  return { createBroker: typeof aedes === 'function' ? aedes : aedes.createBroker }
}

function main (argv) {
  const port = Number(argv[2])
  const host = argv[3] || '127.0.0.1'
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    process.stderr.write(`usage: node server.js PORT [HOST] (got port ${JSON.stringify(argv[2])})\n`)
    process.exit(2)
  }
  const broker = createBroker()
  const server = net.createServer(broker.handle)
  server.on('error', (err) => {
    process.stderr.write(`aedes listener error: ${err.message}\n`)
    process.exit(1)
  })
  server.listen(port, host)
  const stop = () => {
    server.close()
    broker.close(() => process.exit(0))
    setTimeout(() => process.exit(0), 2000).unref()
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

main(process.argv)
