// The admin UI at /ui (and / redirects there): the single-page app that `npm run build` puts in
// dist/ui (sources in src/ui). Files under /ui/assets/ carry a content hash in their names and are
// cached for a year as immutable; everything else, index.html first, is revalidated on each load.
// Any other path under /ui/ (a deep link such as /ui/invocations/inv_1…) answers index.html and
// the app routes it in the browser.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SendOptions } from '@fastify/send';
import { loadPackage } from '../common/load-package.js';
import { KeelError } from '../errors/index.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

export interface UiRoutesOptions {
  /** The built app; by default dist/ui beside this module's dist/admin. */
  root?: string;
}

export const UI_ROOT = fileURLToPath(new URL('../ui/', import.meta.url));

const YEAR_MS = 365 * 24 * 3600 * 1000;

export async function uiRoutes(app: FastifyInstance, opts: UiRoutesOptions): Promise<void> {
  const root = path.resolve(opts.root ?? UI_ROOT);
  const built = fs.existsSync(path.join(root, 'index.html'));

  app.get('/', async (_req, reply) => reply.redirect('/ui/', 302));
  app.get('/ui', async (_req, reply) => reply.redirect('/ui/', 302));

  if (!built) {
    app.log.warn({ root }, 'the admin UI is not built (npm run build): /ui answers 503');
    app.get('/ui/*', async () => {
      throw new KeelError('KEEL0009', `the admin UI is not built: run \`npm run build\` (looked in ${root})`);
    });
    return;
  }

  const revalidated: SendOptions = { root, cacheControl: false };
  const sendIndex = (req: FastifyRequest, reply: FastifyReply) => sendFile(req, reply, 'index.html', revalidated);

  app.get<{ Params: { '*': string } }>('/ui/*', async (req, reply) => {
    const rel = req.params['*'] ?? '';
    if (rel === '' || rel === 'index.html') return sendIndex(req, reply);
    const file = path.resolve(root, rel);
    const inside = file.startsWith(root + path.sep);
    if (inside && rel.startsWith('assets/')) {
      // Hashed names: a changed file gets a new name, so this one never changes.
      return sendFile(req, reply, rel, { root, maxAge: YEAR_MS, immutable: true });
    }
    if (inside && isFile(file)) return sendFile(req, reply, rel, revalidated);
    return sendIndex(req, reply);
  });
}

/**
 * One file through @fastify/send (ranges, conditional requests, ETag, content type), which
 * loads on the first request for the UI (through loadPackage, as every package loaded on use):
 * ~10 ms of module setup a server nobody opens the UI of does not pay at startup.
 */
async function sendFile(req: FastifyRequest, reply: FastifyReply, rel: string, options: SendOptions): Promise<FastifyReply> {
  const { default: send } = await loadPackage<typeof import('@fastify/send')>('@fastify/send');
  const { statusCode, headers, stream } = await send(req.raw, encodeURI(rel), options);
  if (options.cacheControl === false) headers['cache-control'] = 'no-cache';
  return reply.status(statusCode).headers(headers).send(stream);
}

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}
