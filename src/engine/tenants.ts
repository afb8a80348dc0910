/** The tenant that root-created sessions belong to unless a tenant is named. */
export const DEFAULT_TENANT_ID = 'ten_00000000000000000000';
