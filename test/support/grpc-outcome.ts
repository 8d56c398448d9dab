import * as grpc from '@grpc/grpc-js';

// A gRPC call's result as data, so that tests can tally and assert on codes instead of try/catch.

export interface Outcome<T> {
  code: grpc.status;
  details: string;
  value?: T;
}

export async function outcome<T>(call: Promise<T>): Promise<Outcome<T>> {
  try {
    return { code: grpc.status.OK, details: '', value: await call };
  } catch (err) {
    const e = err as Partial<grpc.ServiceError>;
    return {
      code: typeof e.code === 'number' ? e.code : grpc.status.UNKNOWN,
      details: e.details ?? String(err),
    };
  }
}

export const codeName = (code: grpc.status): string => grpc.status[code] ?? String(code);
