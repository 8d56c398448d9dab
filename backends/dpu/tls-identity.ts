import type { PeerCertificate } from 'node:tls';

// Which agent ids a TLS client certificate vouches for: its subject common name and every DNS, URI and
// IP subject alternative name. An agent over TCP may only say hello with one of these, so that one
// DPU's certificate cannot be used to take over another DPU's session.

export function certificateNames(cert: PeerCertificate | undefined): string[] {
  if (!cert || typeof cert !== 'object') return [];
  const names = new Set<string>();
  const cn: unknown = cert.subject?.CN;
  for (const v of Array.isArray(cn) ? cn : [cn]) if (typeof v === 'string' && v) names.add(v);
  // Node renders SANs as "DNS:a, URI:b, IP Address:1.2.3.4". Values with commas would be quoted, and
  // an id containing a comma is not one we accept anyway.
  for (const part of (cert.subjectaltname ?? '').split(', ')) {
    const m = /^(DNS|URI|IP Address):(.+)$/.exec(part.trim());
    if (m?.[2]) names.add(m[2]);
  }
  return [...names];
}
