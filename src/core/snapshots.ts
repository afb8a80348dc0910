/** The SnapshotStore port: where checkpoint images live. The default is a local directory. */
export interface SnapshotStore {
  /** Creates (empty) and returns the directory for a new image. */
  create(snapshotId: string): Promise<string>;
  /** Directory of an existing image; throws NotFoundError when absent. */
  dir(snapshotId: string): string;
  sizeBytes(snapshotId: string): Promise<number>;
  /** Deletes the image; idempotent. */
  delete(snapshotId: string): Promise<void>;
  list(): Promise<string[]>;
}
